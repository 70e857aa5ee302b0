// SIMD MhcPreBackward (SPEC §3) for one Highway target, compiled for each by
// foreach_target. Per chunk of tokens:
//  1. rows:    each token's x and grad_h_in are read once, in order: g_pre as
//              lane sums, then the shared scalar step; x is kept in its own dtype
//              in the v tile, blocked by column item (Tiles below), so that
//  2. columns: per strip (one vector of columns) and block of kBlockRows rows of
//              phi, the block's phi vectors and its chunk sums of G v^T stay in
//              registers while the chunk's tokens stream through the item's tile;
//              gu = phi^T G accumulates in the gu tile, and the last block of rows
//              leaves y = gamma*gu + c*v there and adds the chunk's sums of v*gu;
//  3. rows:    grad_x = h_pre*grad_h_in + y + grad_x_post of each token, in order
//              (the site backward's finish forms grad_x_post here from the post's
//              H and grad_out, as MhcPostBackward's fp32 grad_x); at N = 4 a
//              vector of columns at a time for all streams (RowVectors).
// A lane's tiles are shared by its workers; which worker does what never changes a bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/pre_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>

#include "hwy/cache_control.h"  // FlushStream
#include "hwy/highway.h"
#include "kernels/common/token_math.hpp"
#include "kernels/simd/simd.hpp"
#include "kernels/simd/strip_block-inl.h"
#include "kernels/simd/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {


// A chunk's tiles hold x in its own dtype (v) and gu as fp32 (y once the last
// block of rows has finished a strip), in blocks of one column item:
// [stream n][item of n][token][strip of the item][lane]. The column phase walks a
// strip's tokens at a fixed stride (a token's row of the block, 0.5-1 KiB), and
// the row phases walk a token's strips through contiguous runs: both patterns the
// hardware prefetchers follow ([strip][token][lane] would make the row phases step
// 4 KiB per vector, every load a miss: mhc-bench a backward). A token's row in a
// block is padded by a cache line, so that the rows of tokens a few apart do not
// alias in L1.
constexpr int64_t kBlockFloats = kTokensPerChunk * kTokenFloats;

struct Tiles {
  int64_t L, strips_per_block, blocks_per_stream;  // strips: kColumnsPerItem / L (L known at run time on SVE)
  int64_t v_row;  // elements of a token's row in the v tile (VRow)
  char* v;        // in x's dtype
  float* gu;      // gu, then y = gamma*gu + c*v
  float* u;       // HF32 calls: hf32(v * gamma), the products' operand, laid out as gu; else nullptr
  // The element offset in v, and the address in gu, of strip s (counted in stream n) of the chunk's token t.
  int64_t v_at(int64_t n, int64_t s, int64_t t) const {
    return ((n * blocks_per_stream + s / strips_per_block) * kTokensPerChunk + t) * v_row +
           (s % strips_per_block) * L;
  }
  int64_t gu_offset(int64_t n, int64_t s, int64_t t) const {
    return (n * blocks_per_stream + s / strips_per_block) * kBlockFloats + t * kTokenFloats + (s % strips_per_block) * L;
  }
  float* gu_at(int64_t n, int64_t s, int64_t t) const { return gu + gu_offset(n, s, t); }
  float* u_at(int64_t n, int64_t s, int64_t t) const { return u + gu_offset(n, s, t); }
};

// Elements of a token's row of the v tile: the item's columns and a cache line.
static int64_t VRow(int64_t element_bytes) { return kColumnsPerItem + 64 / element_bytes; }

// Blocks of each tile: one per column item.
static int64_t TileBlocks(const PreShape& d) { return d.N * ceil_div(d.D, kColumnsPerItem); }

// Floats of the v tile (x's dtype), with a line after it, then of the gu tile.
static int64_t VTileFloats(const PreShape& d, int64_t element_bytes) {
  return align16(ceil_div(TileBlocks(d) * kTokensPerChunk * VRow(element_bytes) * element_bytes, 4)) +
         16;
}
static int64_t GuTileFloats(const PreShape& d) { return TileBlocks(d) * kBlockFloats; }

static Tiles TilesOf(const BackwardStep& step) {
  const PreShape& d = step.operands->shape;
  float* base = step.chunk();
  const int64_t element_bytes = core::element_size(d.x_dtype);
  float* gu = base + VTileFloats(d, element_bytes);
  const int64_t L = hn::Lanes(DF());
  return {L, kColumnsPerItem / L, ceil_div(d.D, kColumnsPerItem), VRow(element_bytes),
          reinterpret_cast<char*>(base), gu, d.hf32 ? gu + GuTileFloats(d) : nullptr};
}

int64_t BackwardChunkFloats(const PreShape& d) {
  return VTileFloats(d, core::element_size(d.x_dtype)) + GuTileFloats(d) * (d.hf32 ? 2 : 1);
}

int64_t BackwardScratchFloats(const PreShape& d) {
  return kBlockRows * hn::Lanes(DF()) + align16(d.N);  // zero-padded phi block; g_pre
}

// Token t's stream n: the sum of x * grad_h_in in lanes (one fused multiply-add a
// vector, in column order), x copied into the v tile (and hf32(x * gamma) into the
// u tile). The tiles' offsets advance along a column item's run, and every pointer
// and offset sits in a local, which the stores through void pointers would make the
// loop reload (formed per vector, the phase took 15 % longer and the call 3-4 %:
// bench/ab_builds.py --op pre_backward).
template <DType T>
HWY_INLINE VF StatsRow(const BackwardOperands& o, const Tiles& tiles, int64_t chunk0, int64_t t, int64_t n) {
  const DF df;
  const int64_t L = tiles.L, D = o.shape.D, whole = D / L * L, gh_at = o.grad_h_in.at(t, 0), x_at = o.x.at(t, n);
  const void* const x = o.x.data;
  const void* const grad_h_in = o.grad_h_in.data;
  const float* const gamma = o.gamma.present() ? o.gamma.row(n) : nullptr;
  void* const v_tile = tiles.v;
  float* const u_tile = tiles.u;
  VF lanes = hn::Zero(df);
  int64_t j = 0, strip = 0;
  while (j < whole) {  // a column item's run of the tiles at a time
    const int64_t run_end = std::min(whole, (j / kColumnsPerItem + 1) * kColumnsPerItem);
    // The tiles' offsets of column 0, were the run to reach back to it.
    const int64_t v_at = tiles.v_at(n, strip, t - chunk0) - j, u_at = tiles.gu_offset(n, strip, t - chunk0) - j;
    for (; j < run_end; j += L) {
      const VF v = LoadT<T>(df, x, x_at + j);
      lanes = hn::MulAdd(v, LoadT<T>(df, grad_h_in, gh_at + j), lanes);
      CopyT<T>(df, x, x_at + j, v_tile, v_at + j);
      if (u_tile != nullptr) {  // the products' operand hf32(v * gamma)
        const VF u = gamma != nullptr ? hn::Mul(v, hn::LoadU(df, gamma + j)) : v;
        hn::Store(RoundHf32(df, u), df, u_tile + u_at + j);
      }
    }
    strip = j / L;
  }
  for (; j < D; j += L, ++strip) {
    const int64_t width = std::min(L, D - j);
    const VF v = LoadRow(df, x, T, x_at + j, 1, width);
    lanes = hn::MulAdd(v, LoadRow(df, grad_h_in, T, gh_at + j, 1, width), lanes);
    CopyRow<T>(df, x, x_at + j, 1, width, v_tile, tiles.v_at(n, strip, t - chunk0));
    if (u_tile != nullptr) {
      const VF u = gamma != nullptr ? hn::Mul(v, LoadRow(df, gamma, DType::fp32, j, 1, width)) : v;
      hn::Store(RoundHf32(df, u), df, tiles.u_at(n, strip, t - chunk0));
    }
  }
  return lanes;
}

void BackwardTokenStats(const BackwardStep& step, int64_t chunk0, int64_t t0, int64_t t1) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const DF df;
  const Tiles tiles = TilesOf(step);
  float* g_pre = step.scratch + kBlockRows * tiles.L;
  WithDType(d.x_dtype, [&]<DType T>() {  // grad_h_in has x's dtype
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t n = 0; n < d.N; ++n) g_pre[n] = FoldLanes(df, StatsRow<T>(o, tiles, chunk0, t, n));
      const BackwardBuffers& b = *step.buffers;
      common::backward_token_finish(o, t, g_pre, b.G + t * d.F, b.gz + t * d.F, b.c + t, b.alpha_terms + 3 * t);
    }
  });
}

void BackwardColumns(const BackwardStep& step, int64_t t0, int64_t t1, const ColumnItem& item) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const DF df;
  const Tiles tiles = TilesOf(step);
  const int64_t L = tiles.L, tokens = t1 - t0;
  float* phi_padded = step.scratch;  // [kBlockRows][L]
  const float* G_chunk = step.buffers->G + t0 * d.F;
  const float* c_chunk = step.buffers->c + t0;
  float* phi_total = step.phi_total();
  float* gamma_total = step.gamma_total();
  const float* phi = o.phi.data;
  const int64_t phi_rs = o.phi.row_stride;

  // Blocks of phi rows outside, strips inside (the same sums in the same order as
  // strips outside): a block walks its rows of phi and of the totals through
  // contiguous runs, which the prefetchers follow, while the item's tiles (100-140
  // KiB) stay in L2 between the blocks.
  WithDType(d.x_dtype, [&]<DType T>() {
    for (int64_t f0 = 0; f0 < d.F; f0 += kBlockRows) {
      const int rows = int(std::min<int64_t>(kBlockRows, d.F - f0));
      for (int64_t j = item.d0; j < item.d1; j += L) {
        const int64_t width = std::min(L, item.d1 - j), k = item.n * d.D + j;
        const float* phi_rows[kBlockRows];
        for (int r = 0; r < rows; ++r) {
          phi_rows[r] = phi + (f0 + r) * phi_rs + k;
          if (width < L) {  // copy the real columns, zero the rest
            std::fill_n(phi_padded + r * L, L, 0.0f);
            for (int64_t i = 0; i < width; ++i) phi_padded[r * L + i] = phi[(f0 + r) * phi_rs + k + i];
            phi_rows[r] = phi_padded + r * L;
          }
        }
        const void* v_tile = tiles.v + tiles.v_at(item.n, j / L, 0) * int64_t(core::element_size(T));
        float* gu_tile = tiles.gu_at(item.n, j / L, 0);
        const float* u_tile = tiles.u ? tiles.u_at(item.n, j / L, 0) : nullptr;
        if (f0 + rows < d.F) {
          RunStripBlock<false, T>(rows, G_chunk, d.F, tokens, f0, phi_rows, v_tile, tiles.v_row, gu_tile, f0 == 0,
                                  width, phi_total + k, d.K, StripFinish{}, u_tile);
          continue;
        }
        HWY_ALIGN float gamma[hn::MaxLanes(DF())];
        hn::Store(o.gamma.present() ? LoadRow(df, o.gamma.row(item.n), DType::fp32, j, 1, width) : hn::Set(df, 1.0f),
                  df, gamma);
        RunStripBlock<true, T>(rows, G_chunk, d.F, tokens, f0, phi_rows, v_tile, tiles.v_row, gu_tile, f0 == 0,
                               width, phi_total + k, d.K, StripFinish{c_chunk, gamma, gamma_total + k}, u_tile);
      }
    }
  });
}

// MhcPostBackward's fp32 grad_x of one stream (common::post_grad_x's order):
// sum_i H_row[i] g(i) over the post's N grad_out rows, the first product first.
template <class GradOut>
HWY_INLINE VF PostShare(DF df, const float* H_row, int64_t N, GradOut&& g) {
  VF acc = hn::Mul(hn::Set(df, H_row[0]), g(0));
  for (int64_t i = 1; i < N; ++i) acc = hn::Add(acc, hn::Mul(hn::Set(df, H_row[i]), g(i)));
  return acc;
}

// PostShare of stream n at columns j, token t's grad_out rows loaded here.
template <DType T>
HWY_INLINE VF PostGradX(DF df, const BackwardOperands& o, int64_t t, int64_t n, int64_t j, int64_t width) {
  const int64_t N = o.shape.N;
  return PostShare(df, o.post_h_res.at(t) + n * N, N, [&](int64_t i) HWY_ATTR {
    const int64_t at = o.post_grad_out.at(t, i) + j;
    return width == int64_t(hn::Lanes(df)) ? LoadT<T>(df, o.post_grad_out.data, at)
                                           : LoadRow(df, o.post_grad_out.data, T, at, 1, width);
  });
}

// The whole vectors of token t's grad_x, N = kN streams, kSite: with the post's
// grad_x formed from its grad_out (the site backward). A vector of columns of
// grad_h_in and of the post's N grad_out rows is loaded once for every stream (not
// once a stream: bench/ab_builds.py site_backward_finish); each grad_x in
// BackwardRows' order.
template <DType T, int kN, bool kSite>
HWY_INLINE void RowVectors(const BackwardOperands& o, const Tiles& tiles, int64_t chunk0, int64_t t, bool stream) {
  const DF df;
  const int64_t L = tiles.L, full = o.shape.D / L * L;
  const DType post_dtype = o.grad_x_post_dtype;
  const float* h_pre = common::collapse_weights(o, t);  // or the carried pre-mix
  const float* H = kSite ? o.post_h_res.at(t) : nullptr;
  // Every offset in locals, so that the stores through grad_x's void pointer,
  // which may alias anything, do not make the loop reload them.
  const void* const grad_h_in = o.grad_h_in.data;
  const void* const grad_x_post = o.grad_x_post.data;
  const void* const grad_out = o.post_grad_out.data;
  void* const grad_x = o.grad_x.data;
  const float* const gu = tiles.gu;  // y by now
  const int64_t gh_at = o.grad_h_in.at(t, 0);
  int64_t post_at[kN], out_at[kN], grad_out_at[kN];
  float h_pre_n[kN];
  for (int n = 0; n < kN; ++n) {
    post_at[n] = grad_x_post != nullptr ? o.grad_x_post.at(t, n) : 0;
    out_at[n] = o.grad_x.at(t, n);
    grad_out_at[n] = kSite ? o.post_grad_out.at(t, n) : 0;
    h_pre_n[n] = h_pre[n];
  }
  for (int64_t j = 0; j < full;) {  // a column item's run of the gu tile at a time
    const int64_t run_end = std::min(full, (j / kColumnsPerItem + 1) * kColumnsPerItem);
    int64_t y_at[kN];  // the gu tile's offsets of column 0, were the run to reach back to it
    for (int n = 0; n < kN; ++n) y_at[n] = tiles.gu_offset(n, j / L, t - chunk0) - j;
    for (; j < run_end; j += L) {
      const VF gh = LoadT<T>(df, grad_h_in, gh_at + j);
      VecArray<kN> g;
#pragma GCC unroll 8
      for (int i = 0; i < kN && kSite; ++i) g[i] = LoadT<T>(df, grad_out, grad_out_at[i] + j);
#pragma GCC unroll 8
      for (int n = 0; n < kN; ++n) {
        VF gx = hn::MulAdd(hn::Set(df, h_pre_n[n]), gh, hn::Load(df, gu + y_at[n] + j));
        if (grad_x_post != nullptr)
          gx = hn::Add(gx, post_dtype == T ? LoadT<T>(df, grad_x_post, post_at[n] + j)
                                           : LoadT<DType::fp32>(df, grad_x_post, post_at[n] + j));
        if constexpr (kSite) gx = hn::Add(gx, PostShare(df, H + n * kN, kN, [&](int64_t i) HWY_ATTR { return VF(g[i]); }));
        if (stream) StreamT<T>(df, gx, grad_x, out_at[n] + j);
        else StoreT<T>(df, gx, grad_x, out_at[n] + j);
      }
    }
  }
}

// grad_x = h_pre[n] grad_h_in + y + grad_x_post (y = gamma gu + c v, left in
// the gu tile by the column phase's last block of rows), token by token.
void BackwardRows(const BackwardStep& step, int64_t chunk0, int64_t t0, int64_t t1) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const DF df;
  const Tiles tiles = TilesOf(step);
  const int64_t L = tiles.L, full = d.D / L * L;
  const bool has_post = o.grad_x_post.present(), site_post = o.post_grad_out.present();
  // grad_x far larger than the caches: stream it to memory.
  const bool stream = o.streaming_stores && d.T * d.K * core::element_size(d.x_dtype) > kStreamBytes;
  const DType post_dtype = o.grad_x_post_dtype;  // x's or fp32
  WithDType(d.x_dtype, [&]<DType T>() {  // grad_h_in and grad_x have x's dtype
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t gh_at = o.grad_h_in.at(t, 0);
      // N = 4 runs its whole vectors stream-inner (RowVectors).
      const bool vectors_done = d.N == 4;
      if (vectors_done) {
        if (site_post) RowVectors<T, 4, true>(o, tiles, chunk0, t, stream);
        else RowVectors<T, 4, false>(o, tiles, chunk0, t, stream);
      }
      for (int64_t n = 0; n < d.N; ++n) {
        const VF h_pre = hn::Set(df, common::collapse_weights(o, t)[n]);  // or the carried pre-mix
        const int64_t out_at = o.grad_x.at(t, n);
        const int64_t post_at = has_post ? o.grad_x_post.at(t, n) : 0;
        int64_t j = vectors_done ? full : 0, strip = j / L;
        for (; j < full; j += L, ++strip) {
          const VF y = hn::Load(df, tiles.gu_at(n, strip, t - chunk0));
          VF gx = hn::MulAdd(h_pre, LoadT<T>(df, o.grad_h_in.data, gh_at + j), y);
          if (has_post)
            gx = hn::Add(gx, post_dtype == T ? LoadT<T>(df, o.grad_x_post.data, post_at + j)
                                             : LoadT<DType::fp32>(df, o.grad_x_post.data, post_at + j));
          if (site_post) gx = hn::Add(gx, PostGradX<T>(df, o, t, n, j, L));
          if (stream) StreamT<T>(df, gx, o.grad_x.data, out_at + j);
          else StoreT<T>(df, gx, o.grad_x.data, out_at + j);
        }
        for (; j < d.D; j += L, ++strip) {
          const int64_t width = std::min(L, d.D - j);
          const VF y = hn::Load(df, tiles.gu_at(n, strip, t - chunk0));
          VF gx = hn::MulAdd(h_pre, LoadRow(df, o.grad_h_in.data, T, gh_at + j, 1, width), y);
          if (has_post) gx = hn::Add(gx, LoadRow(df, o.grad_x_post.data, post_dtype, post_at + j, 1, width));
          if (site_post) gx = hn::Add(gx, PostGradX<T>(df, o, t, n, j, width));
          StoreRow(df, gx, o.grad_x.data, T, out_at + j, 1, width);
        }
      }
    }
  });
  if (stream) hwy::FlushStream();
}

// grad_phi = P * gamma (HF32 calls: P, whose sums took u = v * gamma) and
// grad_gamma, P and grad_gamma being the lanes' running totals added in lane
// order, a vector at a time.
void BackwardFinishColumns(const BackwardStep& step, const ColumnItem& item) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const DF df;
  const int64_t L = hn::Lanes(df);
  const BackwardBuffers& b = *step.buffers;
  // Element `at` of every lane's totals, in lane order.
  auto lane_sum = [&](float* const* totals, int64_t at, int64_t width) {
    VF sum = LoadRow(df, totals[0], DType::fp32, at, 1, width);
    for (int lane = 1; lane < b.lanes; ++lane) sum = hn::Add(sum, LoadRow(df, totals[lane], DType::fp32, at, 1, width));
    return sum;
  };
  for (int64_t j = item.d0; j < item.d1; j += L) {
    const int64_t width = std::min(L, item.d1 - j), k = item.n * d.D + j;
    const VF gamma = o.gamma.present() && !d.hf32 ? LoadRow(df, o.gamma.row(item.n), DType::fp32, j, 1, width)
                                                  : hn::Set(df, 1.0f);
    for (int64_t f = 0; f < d.F; ++f)
      StoreRow(df, hn::Mul(lane_sum(b.phi_total, f * d.K + k, width), gamma), o.grad_phi.row(f), DType::fp32, k, 1,
               width);
    if (o.grad_gamma.present())
      StoreRow(df, lane_sum(b.gamma_total, k, width), o.grad_gamma.row(item.n), DType::fp32, j, 1, width);
  }
}

[[maybe_unused]] const PreBackwardKernels kPreBackward = {
    .scratch_floats = BackwardScratchFloats,
    .chunk_floats = BackwardChunkFloats,
    .token_stats = BackwardTokenStats,
    .columns = BackwardColumns,
    .rows = BackwardRows,
    .finish_columns = BackwardFinishColumns,
    .finish_sums = common::finish_sums_scalar
};

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/per_target.hpp"

namespace mhc::kernels::simd {
const PreBackwardKernels* pre_backward(Isa isa) { return MHC_SIMD_PER_TARGET(const PreBackwardKernels*, isa, kPreBackward); }
}  // namespace mhc::kernels::simd
#endif
