// libFuzzer target: mhc::rms_norm_forward and mhc_rms_norm_forward (C++ and C faces); see fuzz_layer.hpp.
#include "fuzz_layer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mhc_fuzz::run_layer_target(data, size, mhc_fuzz::LayerOp::rms_norm);
  return 0;
}
