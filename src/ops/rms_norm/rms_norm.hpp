// MhcRmsNorm (SPEC §16: the RMSNorm an engine fuses into h_in's write) for the
// faces: validate into a problem descriptor, size the workspace, run.
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/described.hpp"

namespace mhc::ops::rms_norm {

struct Problem {
  Isa isa = Isa::reference;  // validated like every operator's; the kernel is one for all families
  core::Dims dims;           // B, S, T, D (N = 1), bsnd
  DType x_dtype = DType::bf16;
  float eps = 1e-6f;
  core::Strided x;       // [B,S,D]
  core::Strided weight;  // [D], x's dtype or fp32
  core::Strided y;       // [B,S,D]
};

Status validate_forward(const RmsNormForwardInputs& in, const RmsNormForwardOutputs& out, const Options& options,
                        Problem* problem);
size_t workspace_bytes(const Problem& problem, int num_threads = 0);
Status run_forward(const Problem& problem, void* workspace, size_t bytes, int num_threads);
Status run_forward_in_thread_workspace(const Problem& problem, int num_threads);

}  // namespace mhc::ops::rms_norm

// The operator's hooks for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(rms_norm_forward, rms_norm::Problem, RmsNormForward, rms_norm::validate_forward,
                       rms_norm::run_forward_in_thread_workspace)
