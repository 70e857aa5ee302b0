// libFuzzer target: mhc::pre_backward and mhc_pre_backward (C++ and C faces).
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mhc_fuzz::run_cpp_target(data, size, mhc_fuzz::Op::backward);
  return 0;
}
