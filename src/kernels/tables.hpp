// Each kernel family's tables, as the families define them and the registry
// lists them (nullptr where the build or CPU has none).
#pragma once

#include "kernels/pre_backward.hpp"
#include "kernels/post.hpp"
#include "kernels/pre_forward.hpp"
#include "kernels/sinkhorn.hpp"
#include "mhc/mhc.hpp"

namespace mhc::kernels {

namespace portable {
extern const PreForwardKernels kPreForward;
extern const PreBackwardKernels kPreBackward;
}  // namespace portable
namespace reference {  // the float64 oracle of the pre block
extern const PreForwardKernels kPreForward;
extern const PreBackwardKernels kPreBackward;
}  // namespace reference
namespace fp32_steps {  // SPEC's fp32 steps as plain loops, one token at a time (the reference and portable families')
extern const SinkhornKernels kSinkhorn;
extern const PostKernels kPost;
}  // namespace fp32_steps
namespace simd {
const PreForwardKernels* pre_forward(Isa isa);    // avx512, avx2, sve2, sve or neon
const PreBackwardKernels* pre_backward(Isa isa);
const SinkhornKernels* sinkhorn(Isa isa);
const PostKernels* post(Isa isa);                 // avx512: post(isa, has_avx512_bf16())
const PostKernels* post(Isa isa, bool hardware_bf16);  // avx512 with bf16 rounded by vcvtne2ps2bf16
bool runs(Isa isa);                               // this CPU runs that Highway target
bool has_avx512_bf16();                           // ... and AVX3 with AVX512_BF16
}  // namespace simd
namespace amx {
extern const PreForwardKernels kPreForward;
bool tiles_usable();  // CPUID, the OS and Linux's permission say yes, and AVX-512 runs
}  // namespace amx

}  // namespace mhc::kernels
