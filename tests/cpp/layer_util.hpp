// Shared helpers of the tests of the rest of the layer (MhcSinkhorn, MhcPost, the
// fused MhcPreSinkhorn; SPEC §10-§12): float64 references written from SPEC's
// formulas alone (nothing of src/), a bag of named host tensors whose bytes a
// rejected call must leave alone, and the C face's tensor conversion.
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

// ------------------------------------------------------------------ Sinkhorn, float64

// One token's forward with every intermediate: P[k] is the matrix after step k
// (P[0] the row softmax p, without eps), div[k] step k's divisors (div[0] the
// softmax's row sums Σ_j exp(z_ij − max_j z_ij)). H = P[2I−1].
struct Sinkhorn64 {
  int64_t N = 0, I = 0;
  std::vector<std::vector<double>> P, div;
  const std::vector<double>& H() const { return P.back(); }
};

// SPEC §10's forward. `eps` is taken as the library takes it (rounded to fp32).
inline Sinkhorn64 sinkhorn_forward64(const double* z, int64_t N, int64_t I, double eps) {
  Sinkhorn64 f;
  f.N = N, f.I = I;
  std::vector<double> P(static_cast<size_t>(N * N)), d(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    double top = z[i * N];
    for (int64_t j = 1; j < N; ++j) top = std::max(top, z[i * N + j]);
    double sum = 0;
    for (int64_t j = 0; j < N; ++j) sum += std::exp(z[i * N + j] - top);
    for (int64_t j = 0; j < N; ++j) P[size_t(i * N + j)] = std::exp(z[i * N + j] - top) / sum;
    d[size_t(i)] = sum;
  }
  f.P.push_back(P);
  f.div.push_back(d);
  for (double& e : P) e += eps;
  for (int64_t k = 1; k < 2 * I; ++k) {
    if (k % 2 == 1) {  // columns
      for (int64_t j = 0; j < N; ++j) {
        double c = 0;
        for (int64_t i = 0; i < N; ++i) c += P[size_t(i * N + j)];
        d[size_t(j)] = c + eps;
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) P[size_t(i * N + j)] /= d[size_t(j)];
    } else {  // rows
      for (int64_t i = 0; i < N; ++i) {
        double r = 0;
        for (int64_t j = 0; j < N; ++j) r += P[size_t(i * N + j)];
        d[size_t(i)] = r + eps;
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) P[size_t(i * N + j)] /= d[size_t(i)];
    }
    f.P.push_back(P);
    f.div.push_back(d);
  }
  return f;
}

// SPEC §10's backward: the reverse of the 2I steps, then the softmax's Jacobian.
inline std::vector<double> sinkhorn_backward64(const Sinkhorn64& f, const double* grad_H) {
  const int64_t N = f.N;
  std::vector<double> G(grad_H, grad_H + N * N);
  for (int64_t k = 2 * f.I - 1; k >= 1; --k) {
    const std::vector<double>& Y = f.P[size_t(k)];
    const std::vector<double>& s = f.div[size_t(k)];
    if (k % 2 == 1) {
      for (int64_t j = 0; j < N; ++j) {
        double d = 0;
        for (int64_t i = 0; i < N; ++i) d += G[size_t(i * N + j)] * Y[size_t(i * N + j)];
        for (int64_t i = 0; i < N; ++i) G[size_t(i * N + j)] = (G[size_t(i * N + j)] - d) / s[size_t(j)];
      }
    } else {
      for (int64_t i = 0; i < N; ++i) {
        double d = 0;
        for (int64_t j = 0; j < N; ++j) d += G[size_t(i * N + j)] * Y[size_t(i * N + j)];
        for (int64_t j = 0; j < N; ++j) G[size_t(i * N + j)] = (G[size_t(i * N + j)] - d) / s[size_t(i)];
      }
    }
  }
  const std::vector<double>& p = f.P[0];
  std::vector<double> gz(static_cast<size_t>(N * N));
  for (int64_t i = 0; i < N; ++i) {
    double d = 0;
    for (int64_t j = 0; j < N; ++j) d += G[size_t(i * N + j)] * p[size_t(i * N + j)];
    for (int64_t j = 0; j < N; ++j) gz[size_t(i * N + j)] = (G[size_t(i * N + j)] - d) * p[size_t(i * N + j)];
  }
  return gz;
}

// ------------------------------------------------------------------ Post, float64 (SPEC §11)

// One token: x [N][D], H [N][N] (nullptr: the identity), h_out [D], h_post [N].
inline std::vector<double> post_forward64(const double* x, const double* H, const double* h_out,
                                          const double* h_post, int64_t N, int64_t D) {
  std::vector<double> out(size_t(N * D));
  for (int64_t j = 0; j < N; ++j)
    for (int64_t d = 0; d < D; ++d) {
      double acc = h_post[j] * h_out[d];
      if (H != nullptr)
        for (int64_t i = 0; i < N; ++i) acc += H[i * N + j] * x[i * D + d];
      else
        acc += x[j * D + d];
      out[size_t(j * D + d)] = acc;
    }
  return out;
}

struct PostGrads64 {
  std::vector<double> grad_x, grad_h_res, grad_h_out, grad_h_post;
};
inline PostGrads64 post_backward64(const double* g, const double* x, const double* H, const double* h_out,
                                   const double* h_post, int64_t N, int64_t D) {
  PostGrads64 r;
  r.grad_x.assign(size_t(N * D), 0.0);
  r.grad_h_res.assign(size_t(N * N), 0.0);
  r.grad_h_out.assign(size_t(D), 0.0);
  r.grad_h_post.assign(size_t(N), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      if (H != nullptr)
        for (int64_t j = 0; j < N; ++j) acc += H[i * N + j] * g[j * D + d];
      else
        acc = g[i * D + d];
      r.grad_x[size_t(i * D + d)] = acc;
    }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t d = 0; d < D; ++d) r.grad_h_res[size_t(i * N + j)] += x[i * D + d] * g[j * D + d];
  for (int64_t d = 0; d < D; ++d)
    for (int64_t j = 0; j < N; ++j) r.grad_h_out[size_t(d)] += h_post[j] * g[j * D + d];
  for (int64_t j = 0; j < N; ++j)
    for (int64_t d = 0; d < D; ++d) r.grad_h_post[size_t(j)] += h_out[d] * g[j * D + d];
  return r;
}

// ------------------------------------------------------------------ MhcPre without gamma, float64 (SPEC §2-§3)

inline double sigmoid64(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// One token's forward, F = 2N + N*N, phi [F][K], alpha [3], bias [F].
struct Pre64 {
  double r = 0;
  std::vector<double> m, z, h_in, h_pre, h_post, z_res;  // m = h_mix, z = the F logits
};
inline Pre64 pre_forward64(const double* v, const double* phi, const double* alpha, const double* bias, int64_t N,
                           int64_t D, double norm_eps, double hc_eps) {
  const int64_t K = N * D, F = 2 * N + N * N;
  Pre64 p;
  double sq = 0;
  for (int64_t k = 0; k < K; ++k) sq += v[k] * v[k];
  p.r = 1.0 / std::sqrt(sq / double(K) + norm_eps);
  p.m.assign(size_t(F), 0.0);
  p.z.assign(size_t(F), 0.0);
  for (int64_t f = 0; f < F; ++f) {
    double m = 0;
    for (int64_t k = 0; k < K; ++k) m += phi[f * K + k] * v[k];
    p.m[size_t(f)] = m;
    const double a = f < N ? alpha[0] : f < 2 * N ? alpha[1] : alpha[2];
    p.z[size_t(f)] = a * (p.r * m) + bias[f];
  }
  for (int64_t n = 0; n < N; ++n) {
    p.h_pre.push_back(sigmoid64(p.z[size_t(n)]) + hc_eps);
    p.h_post.push_back(2 * sigmoid64(p.z[size_t(N + n)]));
  }
  p.z_res.assign(p.z.begin() + 2 * N, p.z.end());
  p.h_in.assign(size_t(D), 0.0);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t n = 0; n < N; ++n) p.h_in[size_t(d)] += p.h_pre[size_t(n)] * v[n * D + d];
  return p;
}

struct PreGrads64 {
  std::vector<double> grad_x, grad_phi, grad_alpha, grad_bias;
};
// SPEC §3 without gamma and grad_x_post, summed over T tokens; x [T][K],
// grad_h_in [T][D], grad_h_post [T][N], grad_z_res [T][N*N]; the forward's
// quantities recomputed here in float64.
inline PreGrads64 pre_backward64(int64_t T, int64_t N, int64_t D, const std::vector<double>& x,
                                 const std::vector<double>& phi, const std::vector<double>& alpha,
                                 const std::vector<double>& bias, const std::vector<double>& grad_h_in,
                                 const std::vector<double>& grad_h_post, const std::vector<double>& grad_z_res,
                                 double norm_eps, double hc_eps) {
  const int64_t K = N * D, F = 2 * N + N * N;
  PreGrads64 g;
  g.grad_x.assign(size_t(T * K), 0.0);
  g.grad_phi.assign(size_t(F * K), 0.0);
  g.grad_alpha.assign(3, 0.0);
  g.grad_bias.assign(size_t(F), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const double* v = &x[size_t(t * K)];
    const Pre64 p = pre_forward64(v, phi.data(), alpha.data(), bias.data(), N, D, norm_eps, hc_eps);
    std::vector<double> gz(static_cast<size_t>(F));
    for (int64_t n = 0; n < N; ++n) {
      double g_pre = 0;
      for (int64_t d = 0; d < D; ++d) g_pre += v[n * D + d] * grad_h_in[size_t(t * D + d)];
      const double s = sigmoid64(p.z[size_t(n)]);
      gz[size_t(n)] = g_pre * s * (1 - s);
      const double sp = sigmoid64(p.z[size_t(N + n)]);
      gz[size_t(N + n)] = grad_h_post[size_t(t * N + n)] * 2 * sp * (1 - sp);
    }
    for (int64_t e = 0; e < N * N; ++e) gz[size_t(2 * N + e)] = grad_z_res[size_t(t * N * N + e)];
    std::vector<double> G(static_cast<size_t>(F));
    double g_r = 0;
    for (int64_t f = 0; f < F; ++f) {
      const int group = f < N ? 0 : f < 2 * N ? 1 : 2;
      const double gw = alpha[size_t(group)] * gz[size_t(f)];
      G[size_t(f)] = p.r * gw;
      g_r += gw * p.m[size_t(f)];
      g.grad_bias[size_t(f)] += gz[size_t(f)];
      g.grad_alpha[size_t(group)] += gz[size_t(f)] * p.r * p.m[size_t(f)];
    }
    const double c = -p.r * p.r * p.r * g_r / double(K);
    for (int64_t k = 0; k < K; ++k) {
      double gu = 0;
      for (int64_t f = 0; f < F; ++f) gu += phi[size_t(f * K + k)] * G[size_t(f)];
      const int64_t n = k / D, d = k % D;
      g.grad_x[size_t(t * K + k)] = p.h_pre[size_t(n)] * grad_h_in[size_t(t * D + d)] + gu + c * v[k];
      for (int64_t f = 0; f < F; ++f) g.grad_phi[size_t(f * K + k)] += G[size_t(f)] * v[k];
    }
  }
  return g;
}

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
