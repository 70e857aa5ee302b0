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
namespace reference {
extern const PreForwardKernels kPreForward;
extern const PreBackwardKernels kPreBackward;
extern const SinkhornKernels kSinkhorn;  // SPEC's fp32 steps, one token at a time
extern const PostKernels kPost;
}  // namespace reference
namespace simd {
const PreForwardKernels* pre_forward(Isa isa);    // avx512, avx2, sve2, sve or neon
const PreBackwardKernels* pre_backward(Isa isa);
const SinkhornKernels* sinkhorn(Isa isa);
const PostKernels* post(Isa isa);
bool runs(Isa isa);                               // this CPU runs that Highway target
}  // namespace simd
namespace amx {
extern const PreForwardKernels kPreForward;
bool tiles_usable();  // CPUID, the OS and Linux's permission say yes, and AVX-512 runs
}  // namespace amx

}  // namespace mhc::kernels
