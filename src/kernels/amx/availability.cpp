// Whether this CPU and OS run the AMX family: CPUID says
// AMX-TILE and AMX-BF16, the OS enables the tile state (XCR0 bits 17-18), Linux
// grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, once per
// process), and the SIMD family runs its AVX-512 target.
#include <cpuid.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/amx/amx.hpp"
#include "kernels/simd/simd.hpp"

namespace mhc::kernels::amx {
namespace {

bool check_tiles() {
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
  return simd::runs(Isa::avx512);
#else
  return false;
#endif
}

}  // namespace

bool tiles_usable() {
  static const bool usable = check_tiles();  // the permission is asked once per process
  return usable;
}

}  // namespace mhc::kernels::amx
