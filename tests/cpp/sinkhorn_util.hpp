// Shared by the tests of MhcSinkhorn and MhcSinkhornBackward (SPEC §10;
// sinkhorn_*_test.cpp): a case's shapes, its tensors, and the calls that run it.
#pragma once

#include <string>
#include <vector>

#include "layer_util.hpp"

namespace mhc_test::layer {

struct SCase {
  int64_t B = 1, S = 5;
  bool bsnd = false;
  int64_t N = 4, I = 20;
  double eps = 1e-6;
  int64_t pitch = 0;  // 0: no caches
  double scale = 1.5;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  std::string name() const {
    return "N" + std::to_string(N) + "_I" + std::to_string(I) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_P" + std::to_string(pitch) + "_seed" + std::to_string(seed);
  }
};
inline void PrintTo(const SCase& c, std::ostream* os) { *os << c.name(); }

inline Shape matrices(const SCase& c) { return token_shape(c.bsnd, c.B, c.S, {c.N, c.N}); }
inline Shape norm_shape(const SCase& c) {
  Shape s{2 * c.I};
  const Shape tok = c.bsnd ? Shape{c.B, c.S} : Shape{c.T()};
  s.insert(s.end(), tok.begin(), tok.end());
  s.push_back(c.N);
  s.push_back(c.pitch);
  return s;
}
inline Shape sum_shape(const SCase& c) {
  Shape s = norm_shape(c);
  s.erase(s.end() - 2);
  return s;
}

// z, grad_h_res (inputs); h_res, norm_out, sum_out, grad_z, grad_z_from_z (outputs).
inline Bag make_bag(const SCase& c) {
  Bag b;
  Rng rng(c.seed * 7919 + 3);
  b["z"] = make_tensor(DType::fp32, matrices(c));
  fill_normal(b["z"], rng, c.scale);
  b["grad_h_res"] = make_tensor(DType::fp32, matrices(c));
  fill_normal(b["grad_h_res"], rng, 1.0);
  b["h_res"] = make_tensor(DType::fp32, matrices(c), kOutputFill);
  if (c.pitch > 0) {
    b["norm_out"] = make_tensor(DType::fp32, norm_shape(c), kOutputFill);
    b["sum_out"] = make_tensor(DType::fp32, sum_shape(c), kOutputFill);
  }
  b["grad_z"] = make_tensor(DType::fp32, matrices(c), kOutputFill);
  b["grad_z_from_z"] = make_tensor(DType::fp32, matrices(c), kOutputFill);
  return b;
}

inline mhc::Status forward(Bag& b, const SCase& c, const mhc::Options& o) {
  mhc::SinkhornForwardOutputs out{b["h_res"].view(), {}, {}};
  if (c.pitch > 0) out.norm_out = b["norm_out"].view(), out.sum_out = b["sum_out"].view();
  return mhc::sinkhorn_forward({b["z"].view(), c.eps, c.I}, out, o);
}
inline mhc::Status backward_from_caches(Bag& b, const mhc::Options& o) {
  mhc::SinkhornBackwardInputs in;
  in.grad_h_res = b["grad_h_res"].view();
  in.norm_out = b["norm_out"].view();
  in.sum_out = b["sum_out"].view();
  return mhc::sinkhorn_backward(in, {b["grad_z"].view()}, o);
}
inline mhc::Status backward_from_z(Bag& b, const SCase& c, const mhc::Options& o, const char* out = "grad_z_from_z") {
  mhc::SinkhornBackwardInputs in;
  in.grad_h_res = b["grad_h_res"].view();
  in.z = b["z"].view();
  in.eps = c.eps;
  in.num_iters = c.I;
  return mhc::sinkhorn_backward(in, {b[out].view()}, o);
}

// Forward (with caches when c has them), backward from the caches and from z.
inline Bag run_all(const SCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = forward(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (c.pitch > 0) {
    s = backward_from_caches(b, o);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  s = backward_from_z(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return b;
}

inline std::vector<std::string> outputs_of(const SCase& c) {
  std::vector<std::string> o = {"h_res", "grad_z_from_z"};
  if (c.pitch > 0) o.insert(o.end(), {"norm_out", "sum_out", "grad_z"});
  return o;
}

}  // namespace mhc_test::layer
