// MhcSinkhorn's problem descriptor (SPEC §10): what its validation produces and
// its driver consumes. One struct for both directions; each uses its fields.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace mhc::core {

struct SinkhornProblem {
  Isa isa = Isa::reference;
  int64_t B = 0, S = 0, T = 0, N = 0;  // z is [B,S,N,N] (TND: B = 1)
  int64_t I = 0;                       // iterations
  float eps = 0.0f;
  int64_t pitch = 0;                   // the caches' row pitch; 0 without caches
  // forward
  Strided z;       // [B,S,N,N]; the backward's recompute reads it too
  Strided h_res;   // [B,S,N,N]
  // backward
  Strided grad_h_res;  // [B,S,N,N]
  Strided grad_z;      // [B,S,N,N]
  // the caches (contiguous [2I][T][N][pitch] and [2I][T][pitch]), or nullptr
  float* norm_out = nullptr;
  float* sum_out = nullptr;
};

}  // namespace mhc::core
