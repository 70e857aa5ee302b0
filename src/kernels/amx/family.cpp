// The AMX family's table, and whether this CPU and OS run it: CPUID says
// AMX-TILE and AMX-BF16, the OS enables the tile state (XCR0 bits 17-18), Linux
// grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, once per
// process), and the SIMD family runs its AVX-512 target.
#include <cpuid.h>

#include <cstring>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/amx/amx.hpp"
#include "kernels/simd/simd.hpp"

namespace mhc::kernels {
namespace {

bool tiles_usable() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
  if (!amx_bf16 || !amx_tile) return false;
  unsigned xcr0_lo, xcr0_hi;
  asm volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG, XTILEDATA
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  const char* simd = simd_best_name();
  return simd != nullptr && std::strcmp(simd, "avx512") == 0;
#else
  return false;
#endif
}

}  // namespace

const Family* amx_family() {
  static const bool usable = tiles_usable();
  static const Family family = {"amx",
                                amx::forward_scratch_floats,
                                simd::backward_scratch_floats,
                                amx::forward_tokens,
                                simd::backward_chunk_floats,
                                simd::backward_token_stats,
                                simd::backward_columns,
                                simd::backward_rows,
                                simd::backward_finish_columns,
                                amx::forward_item_tokens,
                                amx::forward_shared_floats,
                                amx::forward_prepare};
  return usable ? &family : nullptr;
}

}  // namespace mhc::kernels
