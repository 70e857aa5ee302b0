// MhcCollapse and its backward (SPEC §14) for the faces: validate into a problem
// descriptor, size the workspace, run (the two-phase shape of pre/forward.hpp).
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/described.hpp"

namespace mhc::ops::collapse {

// One struct for both directions; each uses its fields.
struct Problem {
  Isa isa = Isa::reference;  // validated like every operator's; the kernels are one for all families
  core::Dims dims;           // B, S, T, N, D, bsnd
  DType x_dtype = DType::bf16;
  core::Strided x;             // [B,S,N,D]
  core::Strided pre_mix;       // [B,S,N]
  core::Strided h;             // [B,S,D]   forward
  core::Strided grad_h;        // [B,S,D]   } backward
  core::Strided grad_x;        // [B,S,N,D] }
  core::Strided grad_pre_mix;  // [B,S,N]   }
};

Status validate_forward(const CollapseForwardInputs& in, const CollapseForwardOutputs& out, const Options& options,
                        Problem* problem);
Status validate_backward(const CollapseBackwardInputs& in, const CollapseBackwardOutputs& out,
                         const Options& options, Problem* problem);

size_t workspace_bytes(const Problem& problem, bool forward, int num_threads = 0);
Status run_forward(const Problem& problem, void* workspace, size_t bytes, int num_threads);
Status run_backward(const Problem& problem, void* workspace, size_t bytes, int num_threads);

Status run_forward_in_thread_workspace(const Problem& problem, int num_threads);
Status run_backward_in_thread_workspace(const Problem& problem, int num_threads);

}  // namespace mhc::ops::collapse

// The operator's hooks for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(collapse_forward, collapse::Problem, CollapseForward, collapse::validate_forward,
                       collapse::run_forward_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(collapse_backward, collapse::Problem, CollapseBackward, collapse::validate_backward,
                       collapse::run_backward_in_thread_workspace)
