// Run-time choice of the kernel family, made once per process.
// MHC_ISA=amx|avx512|avx2|portable|reference forces one (for tests and benchmarks);
// a name this CPU or build cannot run falls back to the best available, with a
// note on stderr.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/kernels.hpp"

namespace mhc::kernels {

#if !defined(MHC_WITH_SIMD)
// Built without Highway (or not for x86-64): the portable kernels only.
const char* simd_best_name() { return nullptr; }
bool simd_force(const char*) { return false; }
const Family* simd_family() { return nullptr; }
#endif
#if !defined(MHC_WITH_AMX)
// Built without the AMX kernels (no SIMD, or an assembler without AMX).
const Family* amx_family() { return nullptr; }
#endif

namespace {

struct Selection {
  const Family* family = nullptr;  // nullptr: the float64 reference
  const char* name = "portable";
};

Selection best_available() {
  if (const Family* amx = amx_family()) {
    simd_force("avx512");  // the AMX family's other kernels are the SIMD family's AVX-512 ones
    return {amx, "amx"};
  }
  if (const char* simd = simd_best_name()) {
    simd_force(simd);  // pin the dispatch so the name reported is the path taken
    return {simd_family(), simd};
  }
  return {portable_family(), "portable"};
}

Selection choose() {
  const char* env = std::getenv("MHC_ISA");
  if (env == nullptr || *env == '\0') return best_available();
  const std::string want(env);
  if (want == "reference") return {nullptr, "reference"};
  if (want == "portable" || want == "scalar") return {portable_family(), "portable"};
  if (want == "amx" && amx_family() != nullptr) return best_available();
  if (simd_force(env)) return {simd_family(), want == "avx512" ? "avx512" : "avx2"};
  const Selection best = best_available();
  std::fprintf(stderr, "mhc: MHC_ISA=%s is not available here; using %s\n", env, best.name);
  return best;
}

const Selection& selection() {
  static const Selection chosen = choose();
  return chosen;
}

}  // namespace

const Family* selected_family() { return selection().family; }
bool reference_selected() { return selection().family == nullptr; }
const char* selected_name() { return selection().name; }

}  // namespace mhc::kernels
