// Vector helpers for the SIMD kernels (compiled once per target by Highway's
// foreach_target): loads of bf16/fp16/fp32 as fp32 vectors, stores that round
// to nearest-even, and a lane fold with a fixed order.
// bf16 rounding is done with integer ops: Debian's Highway 1.0.3 truncates in
// DemoteTo(bf16), and SPEC §2 asks for nearest-even.

// Per-target include guard (Highway's idiom).
#if defined(MHC_KERNELS_SIMD_VEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHC_KERNELS_SIMD_VEC_INL_H_
#undef MHC_KERNELS_SIMD_VEC_INL_H_
#else
#define MHC_KERNELS_SIMD_VEC_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/common/hf32.hpp"
#include "kernels/common/token_math.hpp"
#include "mhc/mhc.hpp"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// An array of kN vectors. SVE's vectors are sizeless types (no arrays, members or
// sizeof of them), so on the scalable targets the vectors live in memory, each
// element read and written whole through a reference object; elsewhere it is a
// plain array of registers.
#if HWY_HAVE_SCALABLE
template <size_t kN>
class VecArray {
  static constexpr size_t kMax = hn::MaxLanes(DF());

 public:
  class Ref {
   public:
    explicit Ref(float* p) : p_(p) {}
    HWY_INLINE operator VF() const { return hn::Load(DF(), p_); }
    HWY_INLINE const Ref& operator=(VF v) const { return hn::Store(v, DF(), p_), *this; }
    HWY_INLINE const Ref& operator=(const Ref& other) const { return *this = VF(other); }

   private:
    float* p_;
  };
  HWY_INLINE Ref operator[](size_t i) { return Ref(lanes_ + i * kMax); }
  HWY_INLINE VF operator[](size_t i) const { return hn::Load(DF(), lanes_ + i * kMax); }

 private:
  HWY_ALIGN float lanes_[kN * kMax];
};
#else
template <size_t kN>
using VecArray = VF[kN];
#endif

HWY_INLINE VF LoadBF16(DF df, const uint16_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du32;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
}

HWY_INLINE VF LoadF16(DF df, const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> df16;
  return hn::PromoteTo(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p)));
}

// Lanes(df) elements of `type` at element offset `offset` of `base`, as fp32.
HWY_INLINE VF LoadAs(DF df, const void* base, DType type, int64_t offset) {
  switch (type) {
    case DType::bf16: return LoadBF16(df, static_cast<const uint16_t*>(base) + offset);
    case DType::fp16: return LoadF16(df, static_cast<const uint16_t*>(base) + offset);
    case DType::fp32: break;
  }
  return hn::LoadU(df, static_cast<const float*>(base) + offset);
}

// v rounded to bf16 in the high half of each 32-bit lane: nearest, ties to even
// (one more where the kept part is odd), a NaN kept as itself made quiet.
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> BF16InHighHalves(DF df, VF v) {
  const hn::RebindToUnsigned<DF> du32;
  const auto bits = hn::BitCast(du32, v);
  const auto up = hn::Add(bits, hn::Set(du32, 0x7fffu));
  const auto rounded = hn::IfThenElse(hn::TestBit(bits, hn::Set(du32, 0x10000u)), hn::Add(up, hn::Set(du32, 1u)), up);
  return hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), hn::Or(bits, hn::Set(du32, 0x00400000u)), rounded);
}

HWY_INLINE void StoreBF16(DF df, VF v, uint16_t* p) {
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  const auto high = hn::ShiftRight<16>(BF16InHighHalves(df, v));
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, high)), du16, p);
}

// Two vectors as 2 * Lanes bf16 at p (v0 first), rounded as StoreBF16 (the same
// integer steps, so the same bits); one two-source permute packs both.
// kHardware (AVX-512 with AVX512_BF16 only: the caller checks the CPU): one
// vcvtne2ps2bf16 rounds and packs both. It rounds as StoreBF16 does (nearest,
// ties to even; a NaN's top bits kept, made quiet) except that it flushes
// subnormal inputs to zero, so vectors holding one take the integer steps.
template <bool kHardware = false>
HWY_INLINE void StoreBF16Pair(DF df, VF v0, VF v1, uint16_t* p, bool stream) {
#if HWY_TARGET == HWY_SCALAR  // the static fallback the registry never names
  StoreBF16(df, v0, p);
  StoreBF16(df, v1, p + hn::Lanes(df));
#else
  const hn::Repartition<uint16_t, DF> du16;
#if HWY_TARGET == HWY_AVX3
  if constexpr (kHardware) {
    __mmask16 subnormal0, subnormal1;
    asm("vfpclassps $0x20, %1, %0" : "=k"(subnormal0) : "v"(v0.raw));
    asm("vfpclassps $0x20, %1, %0" : "=k"(subnormal1) : "v"(v1.raw));
    if ((subnormal0 | subnormal1) == 0) {
      hn::Vec<decltype(du16)> packed;
      asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed.raw) : "v"(v1.raw), "v"(v0.raw));
      if (stream && reinterpret_cast<uintptr_t>(p) % (hn::Lanes(du16) * sizeof(uint16_t)) == 0)
        return hn::Stream(packed, du16, p);
      return hn::StoreU(packed, du16, p);
    }
  }
#else
  static_assert(!kHardware, "vcvtne2ps2bf16 is an AVX-512 instruction");
#endif
  auto round = [&](VF v) { return hn::BitCast(du16, BF16InHighHalves(df, v)); };
  const auto packed = hn::ConcatOdd(du16, round(v1), round(v0));  // the high halves: bf16
  if (stream && reinterpret_cast<uintptr_t>(p) % (hn::Lanes(du16) * sizeof(uint16_t)) == 0)
    return hn::Stream(packed, du16, p);
  hn::StoreU(packed, du16, p);
#endif
}
HWY_INLINE void StoreF16(DF df, VF v, uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> df16;
  hn::StoreU(hn::DemoteTo(df16, v), df16, reinterpret_cast<hwy::float16_t*>(p));
}

// common::round_hf32 on every lane: the same integer steps, NaN kept.
HWY_INLINE VF RoundHf32(DF df, VF v) {
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(di, v);
  const auto rounded = hn::ShiftLeft<13>(hn::ShiftRight<1>(hn::Add(hn::ShiftRight<12>(bits), hn::Set(di, 1))));
  const auto nan = hn::Gt(hn::And(bits, hn::Set(di, 0x7fffffff)), hn::Set(di, 0x7f800000));
  return hn::BitCast(df, hn::IfThenElse(nan, bits, rounded));
}

// count values of row rounded to HF32 in place.
HWY_INLINE void RoundHf32Row(DF df, float* row, int64_t count) {
  const int64_t L = hn::Lanes(df);
  int64_t i = 0;
  for (; i + L <= count; i += L) hn::StoreU(RoundHf32(df, hn::LoadU(df, row + i)), df, row + i);
  common::round_hf32(row + i, count - i);
}

// The same, with the dtype fixed at compile time (for hot loops).
template <DType T>
HWY_INLINE VF LoadT(DF df, const void* base, int64_t offset) {
  if constexpr (T == DType::bf16) return LoadBF16(df, static_cast<const uint16_t*>(base) + offset);
  else if constexpr (T == DType::fp16) return LoadF16(df, static_cast<const uint16_t*>(base) + offset);
  else return hn::LoadU(df, static_cast<const float*>(base) + offset);
}

// Lanes(df) elements of dtype T copied as they are (no conversion).
template <DType T>
HWY_INLINE void CopyT(DF df, const void* from, int64_t from_offset, void* to, int64_t to_offset) {
  if constexpr (T == DType::fp32) {
    hn::StoreU(hn::LoadU(df, static_cast<const float*>(from) + from_offset), df, static_cast<float*>(to) + to_offset);
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    hn::StoreU(hn::LoadU(du16, static_cast<const uint16_t*>(from) + from_offset), du16,
               static_cast<uint16_t*>(to) + to_offset);
  }
}

// `count` (<= Lanes) elements of dtype T at from_offset, from_offset + stride, ...
// copied as they are to to_offset.. (the rest of the vector zero).
template <DType T>
HWY_INLINE void CopyRow(DF df, const void* from, int64_t from_offset, int64_t stride, int64_t count, void* to,
                        int64_t to_offset) {
  const int64_t bytes = core::element_size(T);
  char* out = static_cast<char*>(to) + to_offset * bytes;
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(out + i * bytes, static_cast<const char*>(from) + (from_offset + i * stride) * bytes, bytes);
  std::memset(out + count * bytes, 0, (int64_t(hn::Lanes(df)) - count) * bytes);
}

HWY_INLINE void StoreAs(DF df, VF v, void* base, DType type, int64_t offset) {
  switch (type) {
    case DType::bf16: return StoreBF16(df, v, static_cast<uint16_t*>(base) + offset);
    case DType::fp16: return StoreF16(df, v, static_cast<uint16_t*>(base) + offset);
    case DType::fp32: break;
  }
  hn::StoreU(v, df, static_cast<float*>(base) + offset);
}

template <DType T>
HWY_INLINE void StoreT(DF df, VF v, void* base, int64_t offset) {
  if constexpr (T == DType::bf16) StoreBF16(df, v, static_cast<uint16_t*>(base) + offset);
  else if constexpr (T == DType::fp16) StoreF16(df, v, static_cast<uint16_t*>(base) + offset);
  else hn::StoreU(v, df, static_cast<float*>(base) + offset);
}

// As StoreT, but with a non-temporal (streaming) store when the address allows:
// for outputs far larger than the caches, this skips reading each line before
// writing it. Callers end with hwy::FlushStream().
template <DType T>
HWY_INLINE void StreamT(DF df, VF v, void* base, int64_t offset) {
  if constexpr (T == DType::fp32) {
    float* p = static_cast<float*>(base) + offset;
    if (reinterpret_cast<uintptr_t>(p) % (hn::Lanes(df) * sizeof(float)) == 0) return hn::Stream(v, df, p);
    return hn::StoreU(v, df, p);
  } else {
    uint16_t* p = static_cast<uint16_t*>(base) + offset;
    const hn::Rebind<uint16_t, DF> du16;
    HWY_ALIGN uint16_t lanes[hn::MaxLanes(du16)];
    if (reinterpret_cast<uintptr_t>(p) % (sizeof(uint16_t) * hn::Lanes(du16)) != 0) return StoreT<T>(df, v, base, offset);
    StoreT<T>(df, v, lanes, 0);
    hn::Stream(hn::Load(du16, lanes), du16, p);
  }
}

// Calls body.template operator()<T>() with the dtype as a compile-time constant.
template <class Body>
HWY_INLINE void WithDType(DType type, Body&& body) {
  switch (type) {
    case DType::bf16: return body.template operator()<DType::bf16>();
    case DType::fp16: return body.template operator()<DType::fp16>();
    case DType::fp32: return body.template operator()<DType::fp32>();
  }
}

// `count` (<= Lanes) elements at offset, offset + stride, ... (the rest zero): a
// plain vector load when they are a whole unit-stride vector, else gathered. Both
// give the same values, so a strided view computes the same bits as a contiguous one.
HWY_INLINE VF LoadRow(DF df, const void* base, DType type, int64_t offset, int64_t stride, int64_t count) {
  if (stride == 1 && count == int64_t(hn::Lanes(df))) return LoadAs(df, base, type, offset);
  HWY_ALIGN float buffer[hn::MaxLanes(df)] = {};
  for (int64_t i = 0; i < count; ++i) buffer[i] = core::load_element(base, type, offset + i * stride);
  return hn::Load(df, buffer);
}

// Stores the first `count` lanes at offset, offset + stride, ... (rounding as StoreAs).
HWY_INLINE void StoreRow(DF df, VF v, void* base, DType type, int64_t offset, int64_t stride, int64_t count) {
  if (stride == 1 && count == int64_t(hn::Lanes(df))) return StoreAs(df, v, base, type, offset);
  HWY_ALIGN float buffer[hn::MaxLanes(df)];
  hn::Store(v, df, buffer);
  for (int64_t i = 0; i < count; ++i) core::store_element(base, type, offset + i * stride, buffer[i]);
}

// Asks the cache (level 0 = L1, 1 = L2) for a line. Inline assembly: GCC 12 drops
// __builtin_prefetch (and so _mm_prefetch and hwy::Prefetch) inside functions
// compiled under Highway's target attributes, found by reading the object code.
template <int kLevel>
HWY_INLINE void PrefetchLine(const void* p) {
#if HWY_ARCH_X86
  const char* line = static_cast<const char*>(p);
  if constexpr (kLevel == 0) asm volatile("prefetcht0 %0" : : "m"(*line));
  else asm volatile("prefetcht1 %0" : : "m"(*line));
#else
  (void)p;
#endif
}

// Sum of the lanes, folded by the same fixed tree as the portable kernels
// (fold16: upper half onto lower half until one lane is left), in registers.
template <class D>
HWY_INLINE float FoldHalves(D d, hn::VFromD<D> v) {
#if HWY_TARGET == HWY_SCALAR  // one lane, and no UpperHalf
  (void)d;
  return hn::GetLane(v);
#else
  if constexpr (hn::MaxLanes(D()) == 1) {
    return hn::GetLane(v);
  } else {
    const hn::Half<D> dh;
    return FoldHalves(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
#endif
}

HWY_INLINE float FoldLanes(DF df, VF v) {
#if HWY_HAVE_SCALABLE  // the lanes are known at run time only: the same tree over the stored lanes
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(v, df, lanes);
  for (size_t width = hn::Lanes(df) / 2; width >= 1; width /= 2)
    for (size_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
#else
  static_assert(hn::MaxLanes(DF()) <= 16, "lane fold assumes at most 16 fp32 lanes");
  return FoldHalves(df, v);
#endif
}

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
