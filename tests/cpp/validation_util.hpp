// The validation tests' table machinery: one valid call (the operands of a
// Config), one mutation per rule, and the check that the call is rejected with
// the rule's code, kind and exact message, through both the C++ and the C API,
// with no byte of any tensor written.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "test_util.hpp"

namespace mhc_test {

enum class Op { forward, backward };

// The base calls of the table: N=4, D=8, T=6 (B=2, S=3), bf16, F=2N+N²=24, K=32,
// gamma and grad_x_post given, all caches requested.
inline Config base_config() {
  Config c;
  c.N = 4; c.D = 8; c.B = 2; c.S = 3; c.bsnd = true;
  c.dtype = DType::bf16; c.form = FForm::square; c.gamma = true; c.grad_x_post = true; c.caches = true;
  c.seed = 4242;
  return c;
}
inline Config tnd_config() { Config c = base_config(); c.bsnd = false; c.B = 1; c.S = 6; return c; }
inline Config two_entry_config() { Config c = base_config(); c.form = FForm::two_entry; return c; }
inline Config perm_config() { Config c = base_config(); c.form = FForm::permutation; return c; }  // R=24, F=32
inline Config no_gamma_config() { Config c = base_config(); c.gamma = false; return c; }

// One call's operands and views; the views are what a rule mutates.
struct Call {
  Operands o;
  mhc::PreForwardInputs fin;
  mhc::PreForwardOutputs fout;
  mhc::PreBackwardInputs bin;
  mhc::PreBackwardOutputs bout;
  std::deque<Tensor> extra;  // tensors a rule adds (stable addresses)

  // A new tensor (filled with kOutputFill) whose view a rule puts in place of another.
  TensorView add(DType dtype, const Shape& shape) {
    extra.push_back(make_tensor(dtype, shape, kOutputFill));
    return extra.back().view();
  }
  // An extra flat buffer of `total` elements, and views of `shape` (contiguous
  // strides) starting `elements` into a buffer: for views that must overlap
  // inside one allocation (so the overlap found is the intended one).
  TensorView pool(DType dtype, int64_t total) { return add(dtype, {total}); }
  static TensorView sub(TensorView buffer, int64_t elements, const Shape& shape);
  mhc::Options& options() { return o.options; }

  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<const Tensor*> all = all_tensors(o);
    for (const Tensor& t : extra) all.push_back(&t);
    return snapshot_all(all);
  }
  mhc::Status run(Op op) const {
    return op == Op::forward ? mhc::pre_forward(fin, fout, o.options) : mhc::pre_backward(bin, bout, o.options);
  }
  int run_c(Op op) const;
};

// The valid call of `c` for `op`. The backward's caches and h_post come from a
// real forward; for a forward call, its outputs are reset to the fill pattern
// (a write of the values already there would go unnoticed).
inline std::unique_ptr<Call> make_call(const Config& c, Op op) {
  auto k = std::make_unique<Call>();
  k->o = make_operands(c);
  EXPECT_TRUE(run_forward_with_caches(k->o).ok());
  if (op == Op::forward)
    for (Tensor Operands::*out : {&Operands::h_in, &Operands::h_post, &Operands::h_res, &Operands::inv_rms,
                                  &Operands::h_mix, &Operands::h_pre})
      if ((k->o.*out).present())
        std::memset((k->o.*out).buffer.bytes(), kOutputFill, (k->o.*out).buffer.byte_size());
  k->fin = forward_inputs(k->o);
  k->fout = forward_outputs(k->o);
  k->bin = backward_inputs(k->o);
  k->bout = backward_outputs(k->o);
  return k;
}

// Storage for the C API's optional pointers.
struct OptionalC {
  mhc_tensor t{};
  const mhc_tensor* ptr = nullptr;
  explicit OptionalC(const std::optional<TensorView>& v) {
    if (v) { t = to_c(*v); ptr = &t; }
  }
};


inline int Call::run_c(Op op) const {
  const mhc_options opt = to_c(o.options);
  if (op == Op::forward) {
    const mhc_tensor x = to_c(fin.x), phi = to_c(fin.phi), alpha = to_c(fin.alpha), bias = to_c(fin.bias);
    const mhc_tensor h_in = to_c(fout.h_in);
    const OptionalC gamma(fin.gamma), h_post(fout.h_post), h_res(fout.h_res), inv_rms(fout.inv_rms),
        h_mix(fout.h_mix), h_pre(fout.h_pre);
    return mhc_pre_forward(&x, &phi, &alpha, &bias, gamma.ptr, &h_in, h_post.ptr, h_res.ptr, inv_rms.ptr,
                           h_mix.ptr, h_pre.ptr, &opt);
  }
  const mhc_tensor x = to_c(bin.x), phi = to_c(bin.phi), alpha = to_c(bin.alpha), ghi = to_c(bin.grad_h_in),
                   inv_rms = to_c(bin.inv_rms), h_mix = to_c(bin.h_mix), h_pre = to_c(bin.h_pre),
                   gx = to_c(bout.grad_x), gphi = to_c(bout.grad_phi), galpha = to_c(bout.grad_alpha),
                   gbias = to_c(bout.grad_bias);
  const OptionalC ghp(bin.grad_h_post), ghr(bin.grad_h_res), h_post(bin.h_post), gamma(bin.gamma),
      gxp(bin.grad_x_post), ggamma(bout.grad_gamma);
  return mhc_pre_backward(&x, &phi, &alpha, &ghi, ghp.ptr, ghr.ptr, &inv_rms, &h_mix, &h_pre, h_post.ptr,
                          gamma.ptr, gxp.ptr, &gx, &gphi, &galpha, &gbias, ggamma.ptr, &opt);
}

// One row of the table.
struct Rule {
  std::string name;  // the test's name
  Op op;
  Config base;
  std::function<void(Call&)> mutate;
  mhc::StatusCode code;
  mhc::ErrorKind kind;
  std::string message;  // exact
};
inline void PrintTo(const Rule& r, std::ostream* os) { *os << r.name; }

inline Rule shape_rule(std::string name, Op op, Config base, std::function<void(Call&)> mutate, std::string message) {
  return {std::move(name), op, base, std::move(mutate), mhc::StatusCode::invalid_argument, mhc::ErrorKind::shape,
          std::move(message)};
}
inline Rule dtype_rule(std::string name, Op op, Config base, std::function<void(Call&)> mutate, std::string message) {
  return {std::move(name), op, base, std::move(mutate), mhc::StatusCode::invalid_argument, mhc::ErrorKind::dtype,
          std::move(message)};
}
inline Rule layout_rule(std::string name, Op op, Config base, std::function<void(Call&)> mutate, std::string message) {
  return {std::move(name), op, base, std::move(mutate), mhc::StatusCode::invalid_argument, mhc::ErrorKind::layout,
          std::move(message)};
}
inline Rule value_rule(std::string name, Op op, Config base, std::function<void(Call&)> mutate, std::string message) {
  return {std::move(name), op, base, std::move(mutate), mhc::StatusCode::invalid_argument, mhc::ErrorKind::value,
          std::move(message)};
}
inline Rule null_rule(std::string name, Op op, Config base, std::function<void(Call&)> mutate, std::string message) {
  return {std::move(name), op, base, std::move(mutate), mhc::StatusCode::null_pointer, mhc::ErrorKind::null,
          std::move(message)};
}

// A view of `v`'s memory with another shape (contiguous strides) or other strides.
inline TensorView reshaped(TensorView v, const Shape& shape) {
  v.rank = int32_t(shape.size());
  const Shape strides = contiguous_strides(shape);
  for (size_t i = 0; i < shape.size(); ++i) { v.shape[i] = shape[i]; v.strides[i] = strides[i]; }
  return v;
}
inline TensorView Call::sub(TensorView buffer, int64_t elements, const Shape& shape) {
  TensorView v = reshaped(buffer, shape);
  v.data = static_cast<uint8_t*>(v.data) + elements * element_bytes(v.dtype);
  return v;
}
inline TensorView restrided(TensorView v, const Shape& strides) {
  for (size_t i = 0; i < strides.size(); ++i) v.strides[i] = strides[i];
  return v;
}
inline TensorView retyped(TensorView v, DType dtype) { v.dtype = dtype; return v; }
inline TensorView moved_by_bytes(TensorView v, int64_t bytes) {
  v.data = static_cast<uint8_t*>(v.data) + bytes;
  return v;
}

// The check every row gets.
inline void expect_rejected(const Rule& r) {
  std::unique_ptr<Call> k = make_call(r.base, r.op);
  ASSERT_TRUE(k->run(r.op).ok()) << "the base call of this rule is not valid: " << k->run(r.op).message();
  k = make_call(r.base, r.op);
  r.mutate(*k);
  const auto before = k->snapshot();
  const mhc::Status st = k->run(r.op);
  EXPECT_EQ(st.code(), r.code) << st.message();
  EXPECT_EQ(st.kind(), r.kind) << st.message();
  EXPECT_EQ(st.message(), r.message);
  EXPECT_TRUE(k->snapshot() == before) << "a rejected call wrote memory";
  // The C API: the same code, message and kind, nothing written.
  const int code = k->run_c(r.op);
  EXPECT_EQ(code, static_cast<int>(r.code));
  EXPECT_EQ(std::string(mhc_last_error()), r.message);
  EXPECT_EQ(mhc_last_error_kind(), static_cast<int>(r.kind));
  EXPECT_TRUE(k->snapshot() == before) << "a rejected C call wrote memory";
}

inline std::string rule_name(const ::testing::TestParamInfo<Rule>& info) { return info.param.name; }

}  // namespace mhc_test
