// Shared by the tests of MhcPost and MhcPostBackward (SPEC §11; post_*_test.cpp):
// a case's tensors, and the calls that run it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "layer_util.hpp"

namespace mhc_test::layer {

struct PCase {
  int64_t B = 1, S = 5;
  bool bsnd = false;
  int64_t N = 4, D = 64;
  DType dtype = DType::bf16;
  bool h_res = true;
  bool grad_x_fp32 = false;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  std::string name() const {
    return "N" + std::to_string(N) + "_D" + std::to_string(D) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_" + dtype_name(dtype) + (h_res ? "_hres" : "_identity") +
           (grad_x_fp32 ? "_gx32" : "");
  }
};
inline void PrintTo(const PCase& c, std::ostream* os) { *os << c.name(); }

inline Shape tok(const PCase& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }

inline Bag make_bag(const PCase& c) {
  Bag b;
  Rng rng(c.seed * 104729 + 11);
  b["x"] = make_tensor(c.dtype, tok(c, {c.N, c.D}));
  fill_normal(b["x"], rng, 2.0);
  if (c.h_res) {
    b["h_res"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}));
    fill_uniform(b["h_res"], rng, -0.3, 1.1);
  }
  b["h_out"] = make_tensor(c.dtype, tok(c, {c.D}));
  fill_normal(b["h_out"], rng, 3.0);
  b["h_post"] = make_tensor(DType::fp32, tok(c, {c.N}));
  fill_uniform(b["h_post"], rng, 0.0, 2.0);
  b["grad_out"] = make_tensor(c.dtype, tok(c, {c.N, c.D}));
  fill_normal(b["grad_out"], rng, 1.0);
  b["out"] = make_tensor(c.dtype, tok(c, {c.N, c.D}), kOutputFill);
  b["grad_x"] = make_tensor(c.grad_x_fp32 ? DType::fp32 : c.dtype, tok(c, {c.N, c.D}), kOutputFill);
  b["grad_h_res"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}), kOutputFill);
  b["grad_h_out"] = make_tensor(c.dtype, tok(c, {c.D}), kOutputFill);
  b["grad_h_post"] = make_tensor(DType::fp32, tok(c, {c.N}), kOutputFill);
  return b;
}

inline std::optional<TensorView> h_res_of(Bag& b) {
  return b.t.count("h_res") ? std::optional<TensorView>(b["h_res"].view()) : std::nullopt;
}

inline mhc::Status forward(Bag& b, const mhc::Options& o) {
  return mhc::post_forward({b["x"].view(), h_res_of(b), b["h_out"].view(), b["h_post"].view()}, {b["out"].view()}, o);
}
inline mhc::Status backward(Bag& b, const mhc::Options& o, bool with_grad_h_res = true) {
  return mhc::post_backward(
      {b["grad_out"].view(), b["x"].view(), h_res_of(b), b["h_out"].view(), b["h_post"].view()},
      {b["grad_x"].view(), with_grad_h_res ? std::optional<TensorView>(b["grad_h_res"].view()) : std::nullopt,
       b["grad_h_out"].view(), b["grad_h_post"].view()},
      o);
}
inline Bag run_both(const PCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = forward(b, o);
  EXPECT_TRUE(s.ok()) << s.message();
  s = backward(b, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return b;
}
inline const std::vector<std::string> kOutputs = {"out", "grad_x", "grad_h_res", "grad_h_out", "grad_h_post"};

}  // namespace mhc_test::layer
