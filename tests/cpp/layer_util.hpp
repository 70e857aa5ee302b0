// Shared helpers of the tests of the rest of the layer (MhcSinkhorn, MhcPost, the
// fused MhcPreSinkhorn; SPEC §10-§12): the validation tables' rows and their
// check. Their problems and float64 references are the test drivers'
// (tests/driver/, kernels/reference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "validation_util.hpp"

namespace mhc_test::layer {

inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A table row of a validation test: the mutation of a valid call, and what the
// rejection must say.
template <class CallT>
struct LayerRule {
  std::string name;
  std::function<void(CallT&)> mutate;
  mhc::StatusCode code;
  mhc::ErrorKind kind;
  std::string message;
};
template <class CallT>
void PrintTo(const LayerRule<CallT>& r, std::ostream* os) { *os << r.name; }
template <class CallT>
std::string layer_rule_name(const ::testing::TestParamInfo<LayerRule<CallT>>& info) { return info.param.name; }

#define MHC_LAYER_RULE(kind_, code_)                                                                       \
  template <class CallT>                                                                                   \
  LayerRule<CallT> kind_##_rule(std::string name, std::function<void(CallT&)> mutate, std::string message) { \
    return {std::move(name), std::move(mutate), mhc::StatusCode::code_, mhc::ErrorKind::kind_, std::move(message)}; \
  }
MHC_LAYER_RULE(shape, invalid_argument)
MHC_LAYER_RULE(dtype, invalid_argument)
MHC_LAYER_RULE(layout, invalid_argument)
MHC_LAYER_RULE(value, invalid_argument)
MHC_LAYER_RULE(null, null_pointer)
#undef MHC_LAYER_RULE

// The rule's check: the mutated call is rejected through the C++ face and the C
// face with the rule's code, kind and exact message, and no byte of any tensor
// of the call changes. CallT has make(), run(), run_c() and bag.
template <class CallT>
void expect_layer_rejected(const LayerRule<CallT>& r) {
  {
    auto k = CallT::make();
    const mhc::Status s = k->run();
    ASSERT_TRUE(s.ok()) << "the base call is not valid: " << s.message();
  }
  auto k = CallT::make();
  r.mutate(*k);
  const auto before = k->bag.snapshot();
  const mhc::Status st = k->run();
  EXPECT_EQ(st.code(), r.code) << st.message();
  EXPECT_EQ(st.kind(), r.kind) << st.message();
  EXPECT_EQ(st.message(), r.message);
  EXPECT_TRUE(k->bag.snapshot() == before) << "a rejected call wrote memory";
  const int code = k->run_c();
  EXPECT_EQ(code, static_cast<int>(r.code));
  EXPECT_EQ(std::string(mhc_last_error()), r.message);
  EXPECT_EQ(mhc_last_error_kind(), static_cast<int>(r.kind));
  EXPECT_TRUE(k->bag.snapshot() == before) << "a rejected C call wrote memory";
}

// Families this build and CPU run, and their names.
inline std::string family_name(mhc::Isa isa) { return mhc::isa_name(isa); }


}  // namespace mhc_test::layer
