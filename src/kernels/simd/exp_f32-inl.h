// common::exp_f32 on every lane (kernels/common/exp_f32.hpp): the same constants,
// the same multiplies and adds in the same order, so the same bits.
// Per-target include guard (Highway's idiom).
#if defined(MHC_KERNELS_SIMD_EXP_F32_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHC_KERNELS_SIMD_EXP_F32_INL_H_
#undef MHC_KERNELS_SIMD_EXP_F32_INL_H_
#else
#define MHC_KERNELS_SIMD_EXP_F32_INL_H_
#endif

#include <cmath>

#include "hwy/highway.h"
#include "kernels/common/exp_f32.hpp"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> ExpF32(D df, hn::Vec<D> x) {
  using C = common::ExpF32Constants;
  const hn::RebindToSigned<D> di;
  const auto is_nan = hn::IsNaN(x);
  const auto low = hn::Lt(x, hn::Set(df, C::kLowest));
  const auto high = hn::Gt(x, hn::Set(df, C::kHighest));
  const auto xc = hn::Min(hn::Max(x, hn::Set(df, C::kLowest)), hn::Set(df, C::kHighest));
  const auto n = hn::Round(hn::Mul(xc, hn::Set(df, C::kLog2e)));
  const auto r = hn::Sub(hn::Sub(xc, hn::Mul(n, hn::Set(df, C::kLn2Hi))), hn::Mul(n, hn::Set(df, C::kLn2Lo)));
  auto p = hn::Set(df, C::kP[0]);
  for (int i = 1; i < 6; ++i) p = hn::Add(hn::Mul(p, r), hn::Set(df, C::kP[i]));
  const auto e = hn::Add(hn::Add(hn::Mul(p, hn::Mul(r, r)), r), hn::Set(df, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  auto result = hn::Mul(e, hn::BitCast(df, bits));
  result = hn::IfThenZeroElse(low, result);
  result = hn::IfThenElse(high, hn::Set(df, INFINITY), result);
  return hn::IfThenElse(is_nan, x, result);
}

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MHC_KERNELS_SIMD_EXP_F32_INL_H_
