// MhcPost's problem descriptor (SPEC §11): what its validation produces and its
// driver consumes. One struct for both directions; each uses its fields.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace mhc::core {

struct PostProblem {
  Isa isa = Isa::reference;
  Dims dims;  // B, S, T, N, D, bsnd
  DType x_dtype = DType::bf16;
  // forward (x, h_res, h_out, h_post are the backward's inputs too)
  Strided x;       // [B,S,N,D]
  Strided h_res;   // [B,S,N,N] or absent
  Strided h_out;   // [B,S,D]
  Strided h_post;  // [B,S,N]
  Strided out;     // [B,S,N,D]
  // backward
  Strided grad_out;     // [B,S,N,D]
  Strided grad_x;       // [B,S,N,D], x's dtype or fp32
  Strided grad_h_res;   // [B,S,N,N] or absent
  Strided grad_h_out;   // [B,S,D]
  Strided grad_h_post;  // [B,S,N]
};

}  // namespace mhc::core
