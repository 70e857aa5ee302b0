// libFuzzer target: mhc::site_backward_prepare/finish and mhc_site_backward_*, both variants (C++ and C faces); see fuzz_layer.hpp.
#include "fuzz_layer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mhc_fuzz::run_layer_target(data, size, mhc_fuzz::LayerOp::site);
  return 0;
}
