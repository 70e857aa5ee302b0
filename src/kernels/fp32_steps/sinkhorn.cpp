// MhcSinkhorn in SPEC's fp32 steps (§10), one token at a time, as
// written. The portable family uses these loops too; the SIMD family does the
// same operations across tokens and gives the same bits.
#include <vector>

#include "kernels/common/exp_f32.hpp"
#include "kernels/tables.hpp"

namespace mhc::kernels::fp32_steps {
namespace {

// Slot k of one token's caches: its matrix at norm + k * norm_slot (rows pitch
// apart), its divisors at sum + k * sum_slot.
struct TokenCaches {
  float* norm = nullptr;
  float* sum = nullptr;
  int64_t norm_slot = 0, sum_slot = 0, pitch = 0;
  float* matrix(int64_t k) const { return norm + k * norm_slot; }
  float* divisors(int64_t k) const { return sum + k * sum_slot; }
};

TokenCaches token_caches(const SinkhornCaches& c, const SinkhornShape& s, int64_t t) {
  return {c.norm_out + t * s.N * s.pitch, c.sum_out + t * s.pitch, s.T * s.N * s.pitch, s.T * s.pitch, s.pitch};
}

void store_slot(const TokenCaches& c, int64_t k, int64_t N, const float* P, const float* divisors) {
  float* m = c.matrix(k);
  float* s = c.divisors(k);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < N; ++j) m[i * c.pitch + j] = P[i * N + j];
    for (int64_t j = N; j < c.pitch; ++j) m[i * c.pitch + j] = 0.0f;
    s[i] = divisors[i];
  }
  for (int64_t i = N; i < c.pitch; ++i) s[i] = 0.0f;
}

// P (N*N scratch) ends as H; every slot stored when `caches` has a matrix.
void forward_token(const float* z, const SinkhornShape& s, float* P, float* divisors, const TokenCaches& caches) {
  const int64_t N = s.N;
  const float eps = s.eps;
  for (int64_t i = 0; i < N; ++i) {  // step 0: the row softmax, then + eps
    const float* row = z + i * N;
    float top = row[0];
    for (int64_t j = 1; j < N; ++j) top = row[j] > top ? row[j] : top;
    float sum = 0.0f;
    for (int64_t j = 0; j < N; ++j) {
      P[i * N + j] = common::exp_f32(row[j] - top);
      sum = sum + P[i * N + j];
    }
    for (int64_t j = 0; j < N; ++j) P[i * N + j] = P[i * N + j] / sum;
    divisors[i] = sum;
  }
  if (caches.norm) store_slot(caches, 0, N, P, divisors);
  for (int64_t e = 0; e < N * N; ++e) P[e] = P[e] + eps;
  for (int64_t k = 1; k < s.steps(); ++k) {
    if (k % 2 == 1) {  // columns
      for (int64_t j = 0; j < N; ++j) {
        float c = 0.0f;
        for (int64_t i = 0; i < N; ++i) c = c + P[i * N + j];
        divisors[j] = c + eps;
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) P[i * N + j] = P[i * N + j] / divisors[j];
    } else {  // rows
      for (int64_t i = 0; i < N; ++i) {
        float r = 0.0f;
        for (int64_t j = 0; j < N; ++j) r = r + P[i * N + j];
        divisors[i] = r + eps;
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) P[i * N + j] = P[i * N + j] / divisors[i];
    }
    if (caches.norm) store_slot(caches, k, N, P, divisors);
  }
}

// G (N*N scratch) starts as grad_H; grad_z written.
void backward_token(float* G, const SinkhornShape& s, const TokenCaches& caches, float* grad_z) {
  const int64_t N = s.N, pitch = caches.pitch;
  for (int64_t k = s.steps() - 1; k >= 1; --k) {
    const float* Y = caches.matrix(k);
    const float* div = caches.divisors(k);
    if (k % 2 == 1) {  // a column step
      for (int64_t j = 0; j < N; ++j) {
        float d = 0.0f;
        for (int64_t i = 0; i < N; ++i) d = d + G[i * N + j] * Y[i * pitch + j];
        for (int64_t i = 0; i < N; ++i) G[i * N + j] = (G[i * N + j] - d) / div[j];
      }
    } else {  // a row step
      for (int64_t i = 0; i < N; ++i) {
        float d = 0.0f;
        for (int64_t j = 0; j < N; ++j) d = d + G[i * N + j] * Y[i * pitch + j];
        for (int64_t j = 0; j < N; ++j) G[i * N + j] = (G[i * N + j] - d) / div[i];
      }
    }
  }
  const float* p = caches.matrix(0);  // the softmax's Jacobian
  for (int64_t i = 0; i < N; ++i) {
    float d = 0.0f;
    for (int64_t j = 0; j < N; ++j) d = d + G[i * N + j] * p[i * pitch + j];
    for (int64_t j = 0; j < N; ++j) grad_z[i * N + j] = (G[i * N + j] - d) * p[i * pitch + j];
  }
}

// Scratch: P or G [N*N], divisors [N], and for a recompute the token's own
// caches at pitch N: [2I][N*N] and [2I][N].
int64_t scratch_floats(const SinkhornShape& s) {
  return s.N * s.N + s.N + s.steps() * (s.N * s.N + s.N);
}

void forward_tokens(const SinkhornForwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const SinkhornShape& s = o.shape;
  float* P = scratch;
  float* divisors = P + s.N * s.N;
  for (int64_t t = t0; t < t1; ++t) {
    const TokenCaches caches = o.caches.present() ? token_caches(o.caches, s, t) : TokenCaches{};
    forward_token(o.z.at(t), s, P, divisors, caches);
    for (int64_t e = 0; e < s.N * s.N; ++e) o.h_res.at(t)[e] = P[e];
  }
}

void backward_tokens(const SinkhornBackwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const SinkhornShape& s = o.shape;
  float* G = scratch;
  float* divisors = G + s.N * s.N;
  float* own_norm = divisors + s.N;
  float* own_sum = own_norm + s.steps() * s.N * s.N;
  for (int64_t t = t0; t < t1; ++t) {
    TokenCaches caches;
    if (o.caches.present()) {
      caches = token_caches(o.caches, s, t);
    } else {  // recompute this token's forward into its own caches
      caches = {own_norm, own_sum, s.N * s.N, s.N, s.N};
      SinkhornShape own = s;
      own.pitch = s.N;
      forward_token(o.z.at(t), own, G, divisors, caches);
    }
    for (int64_t e = 0; e < s.N * s.N; ++e) G[e] = o.grad_h_res.at(t)[e];
    backward_token(G, s, caches, o.grad_z.at(t));
  }
}

}  // namespace

const SinkhornKernels kSinkhorn = {
    .scratch_floats = scratch_floats, .item_tokens = 64, .forward = forward_tokens, .backward = backward_tokens};

}  // namespace mhc::kernels::fp32_steps
