// libFuzzer target: mhc::post_pre_forward/backward and mhc_post_pre_*: forward and backward (C++ and C faces); see fuzz_layer.hpp.
#include "fuzz_layer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mhc_fuzz::run_layer_target(data, size, mhc_fuzz::LayerOp::post_pre);
  return 0;
}
