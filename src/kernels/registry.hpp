// The ordered list of kernel implementations, best first: on x86-64 amx > avx512 >
// avx2, on aarch64 sve2 > sve > neon, then portable > reference everywhere. Each entry says what it applies to and whether this
// build and CPU run it; the float64 reference is an ordinary entry (the
// executable SPEC). The operator drivers take the kernels of the entry a call
// selects (ops/isa.hpp) and call them directly.
#pragma once

#include <span>

#include "kernels/pre_backward.hpp"
#include "kernels/pre_forward.hpp"
#include "kernels/tables.hpp"
#include "mhc/mhc.hpp"

namespace mhc::kernels {

struct Implementation {
  Isa isa;
  const char* name;        // MHC_ISA / set_isa name
  const char* applies_to;  // the CPUs and cases it serves
  bool (*available)();     // this build and CPU (and OS) run it
  const PreForwardKernels* pre_forward;
  const PreBackwardKernels* pre_backward;
  const SinkhornKernels* sinkhorn;
  const PostKernels* post;
  // The tables pre_forward is built on (nullptr: none): they run the calls it
  // does not apply to and finish its items.
  const PreForwardKernels* pre_forward_base = nullptr;
};

// Every implementation compiled into this build, best first.
std::span<const Implementation> implementations();
// The entry of `isa` (not automatic), or nullptr when this build has none.
const Implementation* find(Isa isa);
// The best entry this CPU runs (portable and reference always do).
const Implementation& best_available();

}  // namespace mhc::kernels
