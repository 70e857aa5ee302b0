// Each Highway target's microkernels as plain functions, for their testers
// (tests/kernels) and benchmarks (bench/kernel_bench.cpp). The SIMD families call
// the same templates inlined; these tables take their arguments as pointers,
// strides and counts only. Each kind's accumulation order is stated in its
// -inl.h header.
#pragma once

#include <cstdint>
#include <vector>

#include "mhc/mhc.hpp"

namespace mhc::kernels::simd {

struct Microkernels {
  const char* target;  // "avx512", "avx2", "sve2", "sve", "neon"
  int lanes;           // fp32 lanes of a vector (SVE: this CPU's)

  // gemm_tile-inl.h: acc[t][f][lane] += u[t] . w[f] (= with from_zero) over
  // `vectors` vectors, for tokens <= tile_tokens and rows <= tile_rows; u's rows
  // u_row_floats apart, w's rows w_stride apart, acc's tokens acc_stride floats
  // apart (rows L apart). u and acc on vector boundaries.
  int tile_tokens, tile_rows;
  int64_t u_row_floats;
  void (*gemm_tile)(int tokens, int rows, const float* u, const float* w, int64_t w_stride, int64_t vectors,
                    float* acc, int64_t acc_stride, bool from_zero);

  // gemm_tile-inl.h: gemm_tile with its tokens' cast fused in, for tokens <=
  // cast_tile_tokens: x[t] token t's row (x_dtype); u[t] = v * gamma (gamma nullptr:
  // v; HF32-rounded with hf32) stored u_row_floats apart, and multiplied as gemm_tile
  // multiplies u; with sq, the lanes of the sum of v*v from zero at sq + t * lanes.
  int cast_tile_tokens;
  void (*cast_tile)(DType x_dtype, int tokens, int rows, const void* const* x, const float* gamma, bool hf32, float* u,
                    const float* w, int64_t w_stride, int64_t vectors, float* acc, int64_t acc_stride, bool from_zero,
                    float* sq);

  // token_rows-inl.h: u = v * gamma (gamma nullptr: v) and sq_lanes += v*v over the
  // whole vectors of count; returns the elements done.
  int64_t (*scale_row)(DType x_dtype, const void* x, const float* gamma, int64_t count, float* u, float* sq_lanes);
  // out[j] = sum_n h_pre[n] x[n][j], j < count (a multiple of lanes), rows n_stride apart;
  // with stream, by streaming stores where out's alignment allows.
  void (*weighted_rows)(DType dtype, const void* x, int64_t n_stride, const float* h_pre, int64_t N, int64_t count,
                        void* out, bool stream);

  // vec-inl.h: the lanes folded by halves; fp32 vectors stored in a dtype
  // (round to nearest even, NaN kept a NaN); count a multiple of lanes.
  float (*fold_lanes)(const float* lanes);
  void (*store_rounded)(DType dtype, const float* in, int64_t count, void* out);
  // StoreBF16Pair: bf16 two vectors at a time, count a multiple of 2 * lanes; with
  // hardware, by vcvtne2ps2bf16 (avx512 only, where has_avx512_bf16(); else nullptr).
  void (*store_bf16_pairs)(const float* in, int64_t count, uint16_t* out);
  void (*store_bf16_pairs_hardware)(const float* in, int64_t count, uint16_t* out);
  // values[i] = common::round_hf32(values[i]) (kernels/common/hf32.hpp), i < count.
  void (*round_hf32)(float* values, int64_t count);

  // strip_block-inl.h: one strip, rows [f0, f0 + rows) (rows <= block_rows) of the
  // chunk's `tokens` tokens. G [tokens][F]; phi_rows[r] the strip's L floats of
  // row f0 + r; v_tile token rows v_row elements apart (x's dtype); gu tile rows
  // token_floats apart, on vector boundaries; totals rows total_stride apart
  // (`width` real columns).
  // With last: c [tokens], gamma (L floats) and gamma_total (width floats) too.
  // u_tile (nullable): fp32 rows token_floats apart, which the sums of G take instead of v.
  int block_rows;
  int64_t token_floats;
  void (*strip_block)(int rows, bool last, DType x_dtype, const float* G, int64_t F, int64_t tokens, int64_t f0,
                      const float* const* phi_rows, const void* v_tile, int64_t v_row, float* gu_tile, bool first,
                      int64_t width, float* totals, int64_t total_stride, const float* c, const float* gamma,
                      float* gamma_total, const float* u_tile);
};

// The target's table (avx512, avx2, sve2, sve, neon), or nullptr when this build
// has none; call only where runs(isa) (tables.hpp).
const Microkernels* microkernels(Isa isa);
// The tables of every target this build has and this CPU runs, best first.
std::vector<const Microkernels*> runnable_microkernels();

}  // namespace mhc::kernels::simd
