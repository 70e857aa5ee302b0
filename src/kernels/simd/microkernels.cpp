// The microkernel tables of microkernels.hpp, one per Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/microkernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/cache_control.h"  // FlushStream
#include "hwy/highway.h"
#include "kernels/simd/gemm_tile-inl.h"
#include "kernels/simd/microkernels.hpp"
#include "kernels/tables.hpp"
#include "kernels/simd/strip_block-inl.h"
#include "kernels/simd/token_rows-inl.h"
#include "kernels/simd/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {
namespace {

void GemmTileKernel(int tokens, int rows, const float* u, const float* w, int64_t w_stride, int64_t vectors,
                    float* acc, int64_t acc_stride, bool from_zero) {
  RunTile(tokens, rows, u, w, w_stride, vectors, acc, acc_stride, from_zero);
}

void CastTileKernel(DType x_dtype, int tokens, int rows, const void* const* x, const float* gamma, bool hf32, float* u,
                    const float* w, int64_t w_stride, int64_t vectors, float* acc, int64_t acc_stride, bool from_zero,
                    float* sq) {
  // Each token's own row as the row asked for ahead: the prefetches run, and change nothing.
  WithDType(x_dtype, [&]<DType T>() {
    CastTile<T>(tokens, rows, x, gamma, hf32, u, w, w_stride, vectors, acc, acc_stride, from_zero, sq, x);
  });
}

int64_t ScaleRowKernel(DType x_dtype, const void* x, const float* gamma, int64_t count, float* u, float* sq_lanes) {
  const DF df;
  VF sq = hn::LoadU(df, sq_lanes);
  int64_t done = 0;
  WithDType(x_dtype, [&]<DType T>() { done = ScaleRow<T>(x, gamma, count, u, sq, true, static_cast<const char*>(x)); });
  hn::StoreU(sq, df, sq_lanes);
  return done;
}

void WeightedRowsKernel(DType dtype, const void* x, int64_t n_stride, const float* h_pre, int64_t N, int64_t count,
                        void* out, bool stream) {
  WithDType(dtype, [&]<DType T>() { WeightedRows<T>(x, n_stride, h_pre, N, count, out, stream); });
  if (stream) hwy::FlushStream();
}

float FoldLanesKernel(const float* lanes) { return FoldLanes(DF(), hn::LoadU(DF(), lanes)); }

void StoreRoundedKernel(DType dtype, const float* in, int64_t count, void* out) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  WithDType(dtype, [&]<DType T>() {
    for (int64_t i = 0; i < count; i += L) StoreT<T>(df, hn::LoadU(df, in + i), out, i);
  });
}

template <bool kHardware>
void StoreBF16PairsKernel(const float* in, int64_t count, uint16_t* out) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  for (int64_t i = 0; i < count; i += 2 * L)
    StoreBF16Pair<kHardware>(df, hn::LoadU(df, in + i), hn::LoadU(df, in + i + L), out + i, false);
}

void StripBlockKernel(int rows, bool last, DType x_dtype, const float* G, int64_t F, int64_t tokens, int64_t f0,
                      const float* const* phi_rows, const void* v_tile, int64_t v_row, float* gu_tile, bool first,
                      int64_t width, float* totals, int64_t total_stride, const float* c, const float* gamma,
                      float* gamma_total, const float* u_tile) {
  WithDType(x_dtype, [&]<DType T>() {
    if (last) {
      const StripFinish finish{c, gamma, gamma_total};
      RunStripBlock<true, T>(rows, G, F, tokens, f0, phi_rows, v_tile, v_row, gu_tile, first, width, totals,
                             total_stride, finish, u_tile);
    } else {
      RunStripBlock<false, T>(rows, G, F, tokens, f0, phi_rows, v_tile, v_row, gu_tile, first, width, totals,
                              total_stride, StripFinish{}, u_tile);
    }
  });
}

void RoundHf32Kernel(float* values, int64_t count) { RoundHf32Row(DF(), values, count); }

}  // namespace

// Built on first use, where the CPU runs the target: SVE's lane count is read from
// the CPU (a static initialiser would run SVE instructions on CPUs without them).
[[maybe_unused]] Microkernels MakeMicrokernels() {
  return {
    .target = HWY_TARGET == HWY_AVX2 ? "avx2" : HWY_TARGET == HWY_AVX3 ? "avx512" : HWY_TARGET == HWY_SVE2 ? "sve2"
              : HWY_TARGET == HWY_SVE ? "sve" : HWY_TARGET == HWY_NEON ? "neon" : "other",
    .lanes = int(hn::Lanes(DF())),
    .tile_tokens = kTileTokens,
    .tile_rows = kTileRows,
    .u_row_floats = kURowFloats,
    .gemm_tile = GemmTileKernel,
    .cast_tile_tokens = kCastTileTokens,
    .cast_tile = CastTileKernel,
    .scale_row = ScaleRowKernel,
    .weighted_rows = WeightedRowsKernel,
    .fold_lanes = FoldLanesKernel,
    .store_rounded = StoreRoundedKernel,
    .store_bf16_pairs = StoreBF16PairsKernel<false>,
#if HWY_TARGET == HWY_AVX3
    .store_bf16_pairs_hardware = has_avx512_bf16() ? StoreBF16PairsKernel<true> : nullptr,
#else
    .store_bf16_pairs_hardware = nullptr,
#endif
    .round_hf32 = RoundHf32Kernel,
    .block_rows = kBlockRows,
    .token_floats = kTokenFloats,
    .strip_block = StripBlockKernel
  };
}
[[maybe_unused]] const Microkernels* Table() {
  static const Microkernels table = MakeMicrokernels();
  return &table;
}

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/per_target.hpp"

namespace mhc::kernels::simd {
const Microkernels* microkernels(Isa isa) {
  const auto table = MHC_SIMD_PER_TARGET(const Microkernels* (*)(), isa, Table);
  return table != nullptr ? table() : nullptr;
}
std::vector<const Microkernels*> runnable_microkernels() {
  std::vector<const Microkernels*> out;
  for (Isa isa : {Isa::avx512, Isa::avx2, Isa::sve2, Isa::sve, Isa::neon})
    if (runs(isa))
      if (const Microkernels* m = microkernels(isa)) out.push_back(m);
  return out;
}
}  // namespace mhc::kernels::simd
#endif
