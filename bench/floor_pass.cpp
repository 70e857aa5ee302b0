// The floor probe's pass (floor_pass.hpp), once per Highway target, dispatched at run time.
#include "floor_pass.hpp"

#if MHC_BENCH_WITH_HWY
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "floor_pass.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mhc_bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Each element of phi is loaded once and meets one FMA; u's vector is loaded once
// per column vector for a block of kRows rows whose accumulators stay in registers.
#if !HWY_HAVE_SCALABLE
template <int kRows>
void PassRows(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  for (int64_t f0 = 0; f0 < F; f0 += kRows) {
    const int rows = int(std::min<int64_t>(kRows, F - f0));
    hn::Vec<decltype(d)> acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = hn::Zero(d);
    for (int64_t c = c0; c < c1; c += lanes) {
      const auto uv = hn::LoadU(d, u + c);
#pragma GCC unroll 24
      for (int r = 0; r < kRows; ++r)
        if (r < rows) acc[r] = hn::MulAdd(hn::LoadU(d, phi + (f0 + r) * K + c), uv, acc[r]);
    }
    for (int r = 0; r < rows; ++r) hn::StoreU(acc[r], d, out + (f0 + r) * 16);
  }
}
#endif

void FloorPass(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out,
               int blocking) {
#if HWY_HAVE_SCALABLE
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  for (int64_t f = 0; f < F; ++f) {  // sizeless vectors cannot form an array: one row at a time
    auto acc = hn::Zero(d);
    for (int64_t c = c0; c < c1; c += lanes) acc = hn::MulAdd(hn::LoadU(d, phi + f * K + c), hn::LoadU(d, u + c), acc);
    hn::StoreU(acc, d, out + f * 16);
  }
  (void)blocking;
#else
  switch (FloorBlocking(blocking)) {
    case FloorBlocking::all_registers:  // 24 accumulators where there are 32 vector registers, 12 where 16
      return PassRows<HWY_MAX_BYTES >= 64 ? 24 : 12>(phi, F, K, u, c0, c1, out);
    case FloorBlocking::chunked:  // each chunk's sums start over: as the library's slices
      for (int64_t c = c0; c < c1; c += kFloorChunkColumns)
        PassRows<kFloorNarrowRows>(phi, F, K, u, c, std::min(c1, c + kFloorChunkColumns), out);
      return;
    case FloorBlocking::narrow_rows:
      break;
  }
  PassRows<kFloorNarrowRows>(phi, F, K, u, c0, c1, out);
#endif
}

}  // namespace mhc_bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mhc_bench {
const char* floor_blocking_name(FloorBlocking blocking) {
  switch (blocking) {
    case FloorBlocking::all_registers: return "rows of phi as many as the registers hold";
    case FloorBlocking::chunked: return "rows of phi 6 at a time over 2048-column chunks";
    case FloorBlocking::narrow_rows: break;
  }
  return "rows of phi 6 at a time";
}

HWY_EXPORT(FloorPass);

void floor_pass(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out,
                FloorBlocking blocking) {
  HWY_DYNAMIC_DISPATCH(FloorPass)(phi, F, K, u, c0, c1, out, int(blocking));
}
}  // namespace mhc_bench
#endif  // HWY_ONCE

#else  // without Highway: one lane per row
namespace mhc_bench {
const char* floor_blocking_name(FloorBlocking) { return "one row at a time"; }

void floor_pass(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out,
                FloorBlocking) {
  for (int64_t f = 0; f < F; ++f) {
    float acc = 0;
    for (int64_t c = c0; c < c1; ++c) acc += phi[f * K + c] * u[c];
    out[f * 16] = acc;
  }
}
}  // namespace mhc_bench
#endif
