// Shared helpers of the tests of the rest of the layer (MhcSinkhorn, MhcPost, the
// fused MhcPreSinkhorn; SPEC §10-§12): a bag of named host tensors whose bytes a
// rejected call must leave alone, and the C face's tensor conversion. Their
// float64 references are the library's (kernels/reference), checked against
// finite differences and against PyTorch's autograd (tests/python/oracle.py).
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

constexpr double kU = 0x1.0p-24;  // fp32's unit roundoff
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ------------------------------------------------------------------ error measures

inline double max_abs_error(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < want.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

// ------------------------------------------------------------------ tensors

// Named host tensors of one call, and extra ones a rule puts in place of others;
// snapshot() is every byte of all of them (a rejected call changes none).
struct Bag {
  std::map<std::string, Tensor> t;
  std::deque<Tensor> extra;
  Tensor& operator[](const std::string& name) { return t[name]; }
  TensorView add(DType dtype, const Shape& shape) {
    extra.push_back(make_tensor(dtype, shape, kOutputFill));
    return extra.back().view();
  }
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<const Tensor*> all;
    for (const auto& [name, tensor] : t) all.push_back(&tensor);
    for (const Tensor& e : extra) all.push_back(&e);
    return snapshot_all(all);
  }
};

inline void fill_normal(Tensor& t, Rng& rng, double scale) {
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.normal() * scale);
}
inline void fill_uniform(Tensor& t, Rng& rng, double lo, double hi) {
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(lo, hi));
}

// A C tensor for a view, and for an optional view (nullptr when absent).
struct CTensor {
  mhc_tensor t{};
  const mhc_tensor* ptr = nullptr;
  CTensor() = default;
  explicit CTensor(const TensorView& v) : t(to_c(v)), ptr(&t) {}
  explicit CTensor(const std::optional<TensorView>& v) {
    if (v) { t = to_c(*v); ptr = &t; }
  }
  CTensor(const CTensor& o) : t(o.t), ptr(o.ptr ? &t : nullptr) {}
  CTensor& operator=(const CTensor&) = delete;
};

// The per-token shape of a layout: [B,S,inner...] or [T,inner...].
inline Shape token_shape(bool bsnd, int64_t B, int64_t S, std::initializer_list<int64_t> inner) {
  Shape s = bsnd ? Shape{B, S} : Shape{B * S};
  s.insert(s.end(), inner.begin(), inner.end());
  return s;
}

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

// Options that run one family (Options::isa) on `threads` threads (0: the default).
inline mhc::Options options_for(mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  return o;
}

}  // namespace mhc_test::layer
