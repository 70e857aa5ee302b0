// The kernel families a suite or a driver checks, from the library.
#pragma once

#include <cstdlib>
#include <vector>

#include "mhc/mhc.hpp"

namespace mhc_test {

// Every family this build and CPU run, or only the one MHC_ISA names (the full
// tier's per-family processes; a slow emulated CPU asks for its own family alone:
// the others run the same instructions on another CPU, scripts/test_arm64.sh).
inline std::vector<mhc::Isa> families_under_test() {
  mhc::Isa named;
  if (const char* env = std::getenv("MHC_ISA"); env != nullptr && mhc::isa_from_name(env, &named)) return {named};
  return mhc::available_isas();
}

}  // namespace mhc_test
