// Which kernel family a call uses: Options::isa, else the process default
// (set_isa(), else MHC_ISA read once, else the best entry of the registry this
// CPU runs). A family the build or CPU lacks is an error, never a fallback.
#pragma once

#include "kernels/registry.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops {

// The family a call asking for `requested` runs on (never automatic).
Status resolve_isa(Isa requested, Isa* chosen);
// The registry entry of a resolved family.
const kernels::Implementation& implementation(Isa isa);

Status set_default_isa(Isa isa);
Status set_default_isa(const char* name);
// The default's name: the family set or named by MHC_ISA (even one this CPU
// cannot run: calls then fail naming it), else the best available.
const char* default_isa_name();
bool runs_here(Isa isa);
const char* name_of(Isa isa);
// The family `name` names ("scalar" also names portable); false for none.
bool from_name(const char* name, Isa* isa);

}  // namespace mhc::ops
