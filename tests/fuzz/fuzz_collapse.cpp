// libFuzzer target: mhc::collapse_forward/backward and mhc_collapse_*: forward and backward (C++ and C faces); see fuzz_layer.hpp.
#include "fuzz_layer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mhc_fuzz::run_layer_target(data, size, mhc_fuzz::LayerOp::collapse);
  return 0;
}
