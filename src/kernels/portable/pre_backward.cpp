// Portable MhcPreBackward: plain C++ in fp32 (SPEC §3), any architecture.
// Phase 1 (per token): G = dL/dm, c, gz and the grad_alpha terms into the workspace.
// Phase 2 (per chunk of tokens and column item): grad_x, and the chunk's sums of
//          G v^T and v*gu added into the running totals.
#include <algorithm>
#include <cstring>

#include "kernels/common/hf32.hpp"
#include "kernels/common/post_grad_x.hpp"
#include "kernels/common/token_math.hpp"
#include "kernels/tables.hpp"
#include "kernels/portable/blocked_sum.hpp"

namespace mhc::kernels::portable {

namespace {

int64_t backward_scratch_floats(const PreShape& d) {
  const int64_t token_stats = align16(d.K) + align16(d.D) + align16(d.N);  // v, grad_h_in, g_pre
  const int64_t columns = (d.F + 1) * kColumnsPerItem;                     // chunk sums
  return std::max(token_stats, columns);
}

void backward_token_stats(const BackwardStep& step, int64_t, int64_t t0, int64_t t1) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  float* v = step.scratch;                   // [K] token as fp32
  float* grad_h_in = v + align16(d.K);       // [D]
  float* g_pre = grad_h_in + align16(d.D);   // [N] dL/dh_pre
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t j = 0; j < d.D; ++j) v[n * d.D + j] = core::load_element(o.x.data, d.x_dtype, o.x.at(t, n) + j);
    for (int64_t j = 0; j < d.D; ++j)
      grad_h_in[j] = core::load_element(o.grad_h_in.data, d.x_dtype, o.grad_h_in.at(t, 0) + j);
    for (int64_t n = 0; n < d.N; ++n) g_pre[n] = dot(v + n * d.D, grad_h_in, 1, d.D);
    const BackwardBuffers& b = *step.buffers;
    common::backward_token_finish(o, t, g_pre, b.G + t * d.F, b.gz + t * d.F, b.c + t, b.alpha_terms + 3 * t);
  }
}

void backward_columns(const BackwardStep& step, int64_t t0, int64_t t1, const ColumnItem& item) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const int64_t width = item.d1 - item.d0, k0 = item.n * d.D + item.d0;  // <= kColumnsPerItem
  const float* G_all = step.buffers->G;
  const float* c_all = step.buffers->c;
  float* phi_total = step.phi_total();
  float* gamma_total = step.gamma_total();
  // This chunk's sums, [F][width] and [width], in the worker's scratch.
  float* phi_partial = step.scratch;
  float* gamma_partial = phi_partial + d.F * width;

  float v[kColumnsPerItem], u[kColumnsPerItem], gu[kColumnsPerItem], gamma[kColumnsPerItem];
  for (int64_t i = 0; i < width; ++i)
    gamma[i] = o.gamma.present() ? o.gamma.row(item.n)[item.d0 + i] : 1.0f;
  std::fill_n(phi_partial, d.F * width + width, 0.0f);

  for (int64_t t = t0; t < t1; ++t) {
    const float* G = G_all + t * d.F;
    for (int64_t i = 0; i < width; ++i) v[i] = core::load_element(o.x.data, d.x_dtype, o.x.at(t, item.n) + item.d0 + i);
    const float* operand = v;  // of G v^T; HF32 calls: hf32(v * gamma)
    if (d.hf32) {
      for (int64_t i = 0; i < width; ++i) u[i] = common::round_hf32(v[i] * gamma[i]);
      operand = u;
    }
    std::fill_n(gu, width, 0.0f);
    for (int64_t f = 0; f < d.F; ++f) {  // gu = phi^T G, and G v^T
      const float g = G[f];
      const float* phi_row = o.phi.row(f);
      float* partial_row = phi_partial + f * width;
      for (int64_t i = 0; i < width; ++i) {
        gu[i] += phi_row[k0 + i] * g;
        partial_row[i] += g * operand[i];
      }
    }
    const float c = c_all[t];
    const float h_pre = common::collapse_weights(o, t)[item.n];  // or the carried pre-mix
    for (int64_t i = 0; i < width; ++i) {
      const int64_t j = item.d0 + i;
      float gx = h_pre * core::load_element(o.grad_h_in.data, d.x_dtype, o.grad_h_in.at(t, 0) + j);
      gx += gamma[i] * gu[i];
      gx += c * v[i];
      if (o.grad_x_post.present())
        gx += core::load_element(o.grad_x_post.data, o.grad_x_post_dtype, o.grad_x_post.at(t, item.n) + j);
      if (o.post_grad_out.present())  // the site backward's finish
        gx += common::post_grad_x(o.post_h_res.at(t), d.N, item.n, [&](int64_t row) {
          return core::load_element(o.post_grad_out.data, d.x_dtype, o.post_grad_out.at(t, row) + j);
        });
      core::store_element(o.grad_x.data, d.x_dtype, o.grad_x.at(t, item.n) + j, gx);
      gamma_partial[i] += v[i] * gu[i];
    }
  }
  for (int64_t f = 0; f < d.F; ++f)
    for (int64_t i = 0; i < width; ++i) phi_total[f * d.K + k0 + i] += phi_partial[f * width + i];
  for (int64_t i = 0; i < width; ++i) gamma_total[k0 + i] += gamma_partial[i];
}

int64_t no_chunk_floats(const PreShape&) { return 0; }

}  // namespace

const PreBackwardKernels kPreBackward = {.scratch_floats = backward_scratch_floats,
                                         .chunk_floats = no_chunk_floats,
                                         .token_stats = backward_token_stats,
                                         .columns = backward_columns,
                                         .rows = nullptr,
                                         .finish_columns = common::finish_columns_scalar,
                                         .finish_sums = common::finish_sums_scalar};

}  // namespace mhc::kernels::portable
