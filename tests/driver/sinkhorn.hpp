// The test driver of MhcSinkhorn and MhcSinkhornBackward (SPEC §10): an SCase
// (cpp/sinkhorn_util.hpp) forward (with its caches when it has them), backward from
// the caches and from z, through the C++, C and aclnn faces, held to the float64
// reference (kernels/reference/sinkhorn.hpp) within the bounds below.
#pragma once

#include <algorithm>

#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "driver/driver.hpp"
#include "kernels/reference/sinkhorn.hpp"

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

inline std::vector<std::string> outputs_of(const SCase& c) {
  std::vector<std::string> o = {"h_res", "grad_z_from_z"};
  if (c.pitch > 0) o.insert(o.end(), {"norm_out", "sum_out", "grad_z"});
  return o;
}

}  // namespace mhc_test::layer

namespace mhc_test::driver {

// Forward. Every step is a sum of N positive terms and a division (or, step 0,
// exp of z − max and a division): each rounds an entry by at most (N + 1) u
// relative (exp_f32: 2 ulp, plus |z − max| u from rounding its argument). In log
// space those relative errors add, and a normalisation only shifts a row or a
// column by its mean error, so they grow at most linearly in the 2I steps:
// |H − H64| <= (2I (N + 2) + 2 + |z − max|) u · H64, elementwise, times a safety
// factor of 2 (the measured worst is ~0.17 of the bound).
inline double sinkhorn_h_bound(const layer::SCase& c, double spread) {
  return 2.0 * (2.0 * double(c.I) * double(c.N + 2) + 2.0 + spread) * kU;
}
// Backward. Each of the 2I reverse steps forms d = Σ G·Y (N products and sums)
// and (G − d)/s: its error relative to ||G|| is about (N + 2) u amplified by the
// step's norm (<= 2 for a doubly stochastic Y with s ~ 1), and the errors of the
// forward's Y and s enter the same way. Tokenwise normwise bound:
// ||g − g64|| / ||g64|| <= 8 · 2I (N + 2) u · (1 + spread); the measured worst
// (N = 2, I = 1) is ~0.2 of it, most cases below 0.01.
inline double sinkhorn_grad_bound(const layer::SCase& c, double spread) {
  return 8.0 * 2.0 * double(c.I) * double(c.N + 2) * (1.0 + spread) * kU;
}
// The largest spread of logits within a row of one token's z [N][N].
inline double row_spread(const double* z, int64_t N) {
  double spread = 0;
  for (int64_t i = 0; i < N; ++i) {
    const auto [lo, hi] = std::minmax_element(z + i * N, z + (i + 1) * N);
    spread = std::max(spread, *hi - *lo);
  }
  return spread;
}

class SinkhornDriver {
 public:
  using Problem = layer::SCase;
  static constexpr bool kSameBitsOnEveryFamily = true;  // SPEC §10 fixes the steps

  Bag make(const Problem& c) const { return layer::make_bag(c); }
  std::vector<Face> faces(const Problem& c) const {
    // aclnn's caches have the pitch 8·ceil(N/8), its backward reads them only, and
    // its forward takes no empty x.
    if (c.pitch == 8 * ((c.N + 7) / 8) && c.T() > 0) return {Face::cpp, Face::c, Face::aclnn};
    return {Face::cpp, Face::c};
  }
  std::vector<std::string> outputs(const Problem& c, Face face) const {
    if (face == Face::aclnn) return {"h_res", "norm_out", "sum_out", "grad_z"};
    return layer::outputs_of(c);
  }

  // H and both caches elementwise (the caches' padding exactly 0), grad_z normwise
  // per token, from the caches and from z alike.
  Expectations reference(const Problem& c, Bag& b) const {
    const int64_t N = c.N, NN = N * N, T = c.T(), steps = 2 * c.I, P = c.pitch;
    const std::vector<double> z = b["z"].values(), G = b["grad_h_res"].values();
    const double eps = double(float(c.eps));
    Expectations e;
    std::vector<double> h_bound(size_t(T * NN)), norm_bound(size_t(steps * T * N * P)), sum_bound(size_t(steps * T * P));
    e["h_res"].want.resize(size_t(T * NN));
    e["norm_out"].want.assign(norm_bound.size(), 0.0);
    e["sum_out"].want.assign(sum_bound.size(), 0.0);
    std::vector<double> grad, grad_bounds;
    for (int64_t t = 0; t < T; ++t) {
      const auto f = mhc::kernels::reference::sinkhorn_forward(&z[size_t(t * NN)], N, c.I, eps);
      const double spread = row_spread(&z[size_t(t * NN)], N), hb = sinkhorn_h_bound(c, spread);
      for (int64_t i = 0; i < NN; ++i) {
        e["h_res"].want[size_t(t * NN + i)] = f.H()[size_t(i)];
        h_bound[size_t(t * NN + i)] = hb * f.H()[size_t(i)];
      }
      for (int64_t k = 0; k < steps && P > 0; ++k)
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            const size_t at = size_t(((k * T + t) * N + i) * P + j);
            e["norm_out"].want[at] = f.P[size_t(k)][size_t(i * N + j)];
            norm_bound[at] = hb * e["norm_out"].want[at];
          }
          const size_t at = size_t((k * T + t) * P + i);
          e["sum_out"].want[at] = f.div[size_t(k)][size_t(i)];
          sum_bound[at] = hb * e["sum_out"].want[at];
        }
      const std::vector<double> gz = mhc::kernels::reference::sinkhorn_backward(f, &G[size_t(t * NN)]);
      grad.insert(grad.end(), gz.begin(), gz.end());
      grad_bounds.push_back(sinkhorn_grad_bound(c, spread));
    }
    e["h_res"].bound = std::move(h_bound);
    e["norm_out"].bound = std::move(norm_bound);
    e["sum_out"].bound = std::move(sum_bound);
    for (const char* name : {"grad_z", "grad_z_from_z"}) {
      e[name].want = grad;
      e[name].normwise = grad_bounds;
      e[name].group = NN;
    }
    return e;
  }

  // SPEC §10: the backward from the caches is the backward from z, bitwise.
  void also_check(const Problem& c, Face face, Bag& b, const std::string& where, Report& report) const {
    if (c.pitch > 0 && face != Face::aclnn && b["grad_z"].raw() != b["grad_z_from_z"].raw())
      report.fail(where + ": grad_z from the caches differs from grad_z from z");
  }

  mhc::Status run(Face face, const Problem& c, Bag& b, const mhc::Options& o) const {
    const bool caches = c.pitch > 0;
    if (face == Face::cpp) {
      if (mhc::Status s = layer::forward(b, c, o); !s.ok()) return s;
      if (caches)
        if (mhc::Status s = layer::backward_from_caches(b, o); !s.ok()) return s;
      return layer::backward_from_z(b, c, o);
    }
    if (face == Face::c) {
      const std::map<std::string, double> eps = {{"eps", c.eps}};
      const std::map<std::string, int64_t> iters = {{"num_iters", c.I}};
      auto same = [](std::string_view name) { return std::string(name); };
      if (mhc::Status s = call_c("sinkhorn_forward", b, same, eps, iters, o); !s.ok()) return s;
      if (caches) {
        auto from_caches = [](std::string_view name) { return name == "z" ? std::string() : std::string(name); };
        if (mhc::Status s = call_c("sinkhorn_backward", b, from_caches, eps, iters, o); !s.ok()) return s;
      }
      auto from_z = [](std::string_view name) {
        return name == "norm_out" || name == "sum_out" ? std::string()
               : name == "grad_z"                      ? std::string("grad_z_from_z")
                                                       : std::string(name);
      };
      return call_c("sinkhorn_backward", b, from_z, eps, iters, o);
    }
    AclTensors acl;
    uint64_t bytes = 0;
    aclOpExecutor* executor = nullptr;
    aclnnStatus first = aclnnMhcSinkhornGetWorkspaceSize(acl(b, "z"), float(c.eps), c.I, acl(b, "h_res"),
                                                         acl(b, "norm_out"), acl(b, "sum_out"), &bytes, &executor);
    if (mhc::Status s = run_aclnn("aclnnMhcSinkhorn", first, bytes, executor, aclnnMhcSinkhorn); !s.ok()) return s;
    first = aclnnMhcSinkhornBackwardGetWorkspaceSize(acl(b, "grad_h_res"), acl(b, "norm_out"), acl(b, "sum_out"),
                                                     acl(b, "grad_z"), &bytes, &executor);
    return run_aclnn("aclnnMhcSinkhornBackward", first, bytes, executor, aclnnMhcSinkhornBackward);
  }
};

}  // namespace mhc_test::driver
