// The implementation list (registry.hpp).
#include "kernels/registry.hpp"

namespace mhc::kernels {
namespace {

bool always() { return true; }
#if defined(MHC_WITH_SIMD) && defined(__x86_64__)
bool avx512_runs() { return simd::runs(Isa::avx512); }
bool avx2_runs() { return simd::runs(Isa::avx2); }
#endif
#if defined(MHC_WITH_SIMD) && defined(__aarch64__)
bool sve2_runs() { return simd::runs(Isa::sve2); }
bool sve_runs() { return simd::runs(Isa::sve); }
bool neon_runs() { return simd::runs(Isa::neon); }
#endif

// Built on first use, not at static initialisation: the tables it names live in
// other translation units, and a static initialiser elsewhere may ask for it.
std::span<const Implementation> build() {
  static const Implementation kImplementations[] = {
#if defined(MHC_WITH_AMX)
    {.isa = Isa::amx,
     .name = "amx",
     .applies_to = "x86-64 with AVX-512 and AMX-BF16 tiles granted by the OS; MhcPre's F x K product "
                   "on tiles for bf16 and fp16 x, everything else the avx512 kernels",
     .available = amx::tiles_usable,
     .pre_forward = &amx::kPreForward,
     .pre_backward = simd::pre_backward(Isa::avx512),
     .sinkhorn = simd::sinkhorn(Isa::avx512),
     .post = simd::post(Isa::avx512),
     .pre_forward_base = simd::pre_forward(Isa::avx512)},
#endif
#if defined(MHC_WITH_SIMD) && defined(__x86_64__)
    {.isa = Isa::avx512,
     .name = "avx512",
     .applies_to = "x86-64 with AVX-512 (F, BW, DQ, VL): Highway's AVX3 target; MhcPost's bf16 outputs "
                   "rounded by vcvtne2ps2bf16 where AVX512_BF16 is present",
     .available = avx512_runs,
     .pre_forward = simd::pre_forward(Isa::avx512),
     .pre_backward = simd::pre_backward(Isa::avx512),
     .sinkhorn = simd::sinkhorn(Isa::avx512),
     .post = simd::post(Isa::avx512)},
    {.isa = Isa::avx2,
     .name = "avx2",
     .applies_to = "x86-64 with AVX2, FMA and F16C: Highway's AVX2 target",
     .available = avx2_runs,
     .pre_forward = simd::pre_forward(Isa::avx2),
     .pre_backward = simd::pre_backward(Isa::avx2),
     .sinkhorn = simd::sinkhorn(Isa::avx2),
     .post = simd::post(Isa::avx2)},
#endif
#if defined(MHC_WITH_SIMD) && defined(__aarch64__)
    {.isa = Isa::sve2,
     .name = "sve2",
     .applies_to = "aarch64 with SVE2 and vectors of 128 to 512 bits (Neoverse N2, V2; Grace): Highway's SVE2 "
                   "target; bits depend on the vector length",
     .available = sve2_runs,
     .pre_forward = simd::pre_forward(Isa::sve2),
     .pre_backward = simd::pre_backward(Isa::sve2),
     .sinkhorn = simd::sinkhorn(Isa::sve2),
     .post = simd::post(Isa::sve2)},
    {.isa = Isa::sve,
     .name = "sve",
     .applies_to = "aarch64 with SVE and vectors of 128 to 512 bits (A64FX, Neoverse V1; Graviton3): Highway's SVE "
                   "target; bits depend on the vector length",
     .available = sve_runs,
     .pre_forward = simd::pre_forward(Isa::sve),
     .pre_backward = simd::pre_backward(Isa::sve),
     .sinkhorn = simd::sinkhorn(Isa::sve),
     .post = simd::post(Isa::sve)},
    {.isa = Isa::neon,
     .name = "neon",
     .applies_to = "aarch64 with Advanced SIMD and the AES instructions (Highway's NEON target requires them): 128-bit "
                   "vectors",
     .available = neon_runs,
     .pre_forward = simd::pre_forward(Isa::neon),
     .pre_backward = simd::pre_backward(Isa::neon),
     .sinkhorn = simd::sinkhorn(Isa::neon),
     .post = simd::post(Isa::neon)},
#endif
    {.isa = Isa::portable,
     .name = "portable",
     .applies_to = "any CPU: plain C++ in fp32",
     .available = always,
     .pre_forward = &portable::kPreForward,
     .pre_backward = &portable::kPreBackward,
     .sinkhorn = &fp32_steps::kSinkhorn,  // SPEC fixes their fp32 steps: plain C++ loops (fp32_steps)
     .post = &fp32_steps::kPost},
    {.isa = Isa::reference,
     .name = "reference",
     .applies_to = "any CPU: MhcPre in float64, one thread for its backward (the oracle, not for speed); MhcSinkhorn and "
                   "MhcPost in SPEC's fp32 steps, one element at a time",
     .available = always,
     .pre_forward = &reference::kPreForward,
     .pre_backward = &reference::kPreBackward,
     .sinkhorn = &fp32_steps::kSinkhorn,
     .post = &fp32_steps::kPost},
  };
  return kImplementations;
}

}  // namespace

std::span<const Implementation> implementations() { return build(); }

const Implementation* find(Isa isa) {
  for (const Implementation& impl : implementations())
    if (impl.isa == isa) return &impl;
  return nullptr;
}

const Implementation& best_available() {
  for (const Implementation& impl : implementations())
    if (impl.available()) return impl;
  return implementations().back();  // the reference runs everywhere
}

}  // namespace mhc::kernels
