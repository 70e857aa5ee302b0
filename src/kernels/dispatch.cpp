// Run-time choice of the kernel family, made once per process.
// MHC_ISA forces one (for tests and benchmarks); an unknown or unsupported name
// falls back to the best available, with a note on stderr.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/kernels.hpp"

namespace mhc::kernels {
namespace {

struct Selection {
  const Family* family = nullptr;  // nullptr: the float64 reference
  const char* name = "portable";
};

Selection best_available() { return {portable_family(), "portable"}; }

Selection choose() {
  const char* env = std::getenv("MHC_ISA");
  if (env == nullptr || *env == '\0') return best_available();
  const std::string want(env);
  if (want == "reference") return {nullptr, "reference"};
  if (want == "portable" || want == "scalar") return {portable_family(), "portable"};
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
