// Shared helpers of the C++ tests: the families under test, and gtest's side of
// the host tensors (common/host_tensor.hpp) and of MhcPre's operands
// (driver/pre_problem.hpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/families.hpp"
#include "driver/pre_problem.hpp"
#include "kernels/registry.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"

namespace mhc_test {

// MHC_ISA naming a family this build or CPU cannot run makes every call fail
// (naming it): the binary's tests are then skipped, saying so.
struct RequestedFamilyEnvironment : ::testing::Environment {
  void SetUp() override {
    const char* want = std::getenv("MHC_ISA");
    if (want == nullptr || *want == '\0') return;
    mhc::Isa isa;
    if (mhc::isa_from_name(want, &isa) && mhc::isa_available(isa)) return;
    GTEST_SKIP() << "MHC_ISA=" << want << ": not a kernel family this build and CPU run";
  }
};
inline ::testing::Environment* const kRequestedFamilyEnvironment =
    ::testing::AddGlobalTestEnvironment(new RequestedFamilyEnvironment);

inline bool reference_selected() { return std::string(mhc::isa()) == "reference"; }

// Every family this build and CPU run, best first.
inline std::vector<mhc::Isa> available_families() { return mhc::available_isas(); }


using mhc::DType;
using mhc::TensorView;
using Shape = std::vector<int64_t>;

// Every byte of the buffer that no element of the view covers still equals `fill`.
inline ::testing::AssertionResult gaps_untouched(const Tensor& t, uint8_t fill) {
  std::vector<bool> covered(t.buffer.byte_size(), false);
  const int64_t esize = element_bytes(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i)
    for (int64_t b = 0; b < esize; ++b) covered[size_t(t.index(i) * esize + b)] = true;
  for (size_t b = 0; b < covered.size(); ++b)
    if (!covered[b] && t.buffer.bytes()[b] != fill)
      return ::testing::AssertionFailure()
             << "byte " << b << " outside the view changed to 0x" << std::hex << int(t.buffer.bytes()[b]);
  return ::testing::AssertionSuccess();
}

}  // namespace mhc_test
