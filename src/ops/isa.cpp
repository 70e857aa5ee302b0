// The kernel family of a call (isa.hpp).
#include "ops/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

namespace mhc::ops {
namespace {

constexpr Isa kNamed[] = {Isa::amx,  Isa::avx512, Isa::avx2,     Isa::sve2,
                          Isa::sve, Isa::neon,   Isa::portable, Isa::reference};

std::string available_list() {
  std::string out;
  for (const kernels::Implementation& impl : kernels::implementations())
    if (impl.available()) out += (out.empty() ? "" : ", ") + std::string(impl.name);
  return out;
}

Status unavailable(const std::string& who, const std::string& name) {  // name: as given
  return {StatusCode::invalid_argument, ErrorKind::value,
          who + ": '" + name + "' is not a kernel family this build and CPU run (available: " + available_list() +
              ")"};
}

// A family's name, or the number a caller gave that names none.
std::string label(Isa isa) {
  if (std::string(name_of(isa)) == "unknown") return "value " + std::to_string(int(isa));
  return name_of(isa);
}

// MHC_ISA, read once: unset or empty (automatic), a family, or a name that is not usable.
struct EnvironmentChoice {
  Isa isa = Isa::automatic;
  std::string invalid;  // the name, when MHC_ISA names nothing this build and CPU run
};

const EnvironmentChoice& environment_choice() {
  static const EnvironmentChoice choice = [] {
    EnvironmentChoice c;
    const char* env = std::getenv("MHC_ISA");
    if (env == nullptr || *env == '\0') return c;
    Isa named;
    if (from_name(env, &named) && runs_here(named)) c.isa = named;
    else c.invalid = env;
    return c;
  }();
  return choice;
}

std::atomic<Isa> set_default{Isa::automatic};  // set_isa(); automatic: MHC_ISA or the best

}  // namespace

bool from_name(const char* name, Isa* isa) {
  if (name == nullptr) return false;
  const std::string wanted(name);
  if (wanted == "scalar") return *isa = Isa::portable, true;  // "scalar" also names portable
  for (Isa candidate : kNamed)
    if (wanted == name_of(candidate)) return *isa = candidate, true;
  return false;
}

const char* name_of(Isa isa) {
  switch (isa) {
    case Isa::automatic: return "automatic";
    case Isa::amx: return "amx";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::sve2: return "sve2";
    case Isa::sve: return "sve";
    case Isa::neon: return "neon";
    case Isa::portable: return "portable";
    case Isa::reference: return "reference";
  }
  return "unknown";
}

bool runs_here(Isa isa) {
  if (isa == Isa::automatic) return true;
  const kernels::Implementation* impl = kernels::find(isa);
  return impl != nullptr && impl->available();
}

const kernels::Implementation& implementation(Isa isa) { return *kernels::find(isa); }

Status resolve_isa(Isa requested, Isa* chosen) {
  if (requested == Isa::automatic) requested = set_default.load(std::memory_order_relaxed);
  if (requested == Isa::automatic) {
    const EnvironmentChoice& env = environment_choice();
    if (!env.invalid.empty()) return unavailable("MHC_ISA", env.invalid);
    requested = env.isa != Isa::automatic ? env.isa : kernels::best_available().isa;
  }
  if (!runs_here(requested)) return unavailable("isa", label(requested));
  *chosen = requested;
  return {};
}

Status set_default_isa(Isa isa) {
  if (!runs_here(isa)) return unavailable("isa", label(isa));
  set_default.store(isa, std::memory_order_relaxed);
  return {};
}

Status set_default_isa(const char* name) {
  if (name == nullptr || *name == '\0') return set_default_isa(Isa::automatic);
  Isa isa;
  if (!from_name(name, &isa)) return unavailable("isa", name);
  return set_default_isa(isa);
}

const char* default_isa_name() {
  const Isa set = set_default.load(std::memory_order_relaxed);
  if (set != Isa::automatic) return name_of(set);
  const EnvironmentChoice& env = environment_choice();
  if (!env.invalid.empty()) return env.invalid.c_str();
  return name_of(env.isa != Isa::automatic ? env.isa : kernels::best_available().isa);
}

}  // namespace mhc::ops
