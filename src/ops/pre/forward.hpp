// MhcPre (SPEC §2) for the faces: validate into a problem descriptor, size the
// workspace, run. The two-phase shape of aclnn and oneDNN: validation and sizing
// write nothing; run writes only the outputs and the workspace it is given.
#pragma once

#include <cstddef>
#include <memory>

#include "ops/described.hpp"
#include "core/problem.hpp"
#include "kernels/pre_forward.hpp"
#include "mhc/mhc.hpp"
#include "ops/pre/forward_plan.hpp"
#include "ops/pre/prepared.hpp"

namespace mhc::ops::pre::forward {

// What a face asks of validation besides SPEC's tensors.
struct Rules {
  bool eps_values = true;  // eps finite and >= 0 (the aclnn face: CANN checks no eps value)
};

Status validate(const PreForwardInputs& in, const PreForwardOutputs& out, const Options& options,
                core::ForwardProblem* problem, const Rules& rules = {});
// A problem planned for a thread count (oneDNN's primitive): the kernels of its
// family, the plan and the workspace size are fixed once, so a face that runs the
// same problem again only lays out the workspace and runs.
struct Primitive {
  core::ForwardProblem problem;
  int threads = 1;
  const kernels::PreForwardKernels* kernels = nullptr;
  kernels::FinishTokens finish = nullptr;  // what the items end with (the base table's)
  Plan plan;
  bool staged = false;  // some tensor is gathered into or scattered from the workspace
  // The kernels' view of the problem's tensors (unless staged). Kept here, not
  // formed per call: a helper thread reads it from its own cache when the same
  // primitive runs again (the primitive cache), instead of from the caller's stack.
  kernels::ForwardOperands operands;
  size_t workspace_bytes = 0;
  // A prepared call's forms (ops/pre/prepared.hpp): its phi copy, its kernels'
  // preparation, which the run then does not make, and phi in its kernels' panels.
  std::shared_ptr<const PreparedPre::Form> phi_form, weights_form, panels_form;
};

// num_threads <= 0: the default count.
Primitive make_primitive(const core::ForwardProblem& problem, int num_threads = 0);
// The same from this thread's primitive cache (ops/primitive_cache.hpp): what every
// face runs, so a problem asked again is not planned again.
std::shared_ptr<const Primitive> cached_primitive(const core::ForwardProblem& problem, int num_threads = 0);
// What a fused operator runs on a range of tokens before the pre reads them
// (ops/post_pre: MhcPost writing x): by the worker that then runs those tokens'
// item, while the rows are in its cache.
struct TokenPrologue {
  void (*run)(const void* context, int64_t t0, int64_t t1, int worker) = nullptr;
  const void* context = nullptr;
};

// `workspace`: primitive.workspace_bytes bytes aligned to 64 (nullptr when 0).
// With a prologue, each item runs it first; calls that read x before their items
// (staged, decode-sized, serial) run it on every token first.
Status run(const Primitive& primitive, void* workspace, size_t workspace_bytes,
           const TokenPrologue* prologue = nullptr);

// Both of the above in one.
size_t workspace_bytes(const core::ForwardProblem& problem, int num_threads = 0);
Status run(const core::ForwardProblem& problem, void* workspace, size_t workspace_bytes, int num_threads,
           const TokenPrologue* prologue = nullptr);

// run() in the calling thread's reused workspace, sized here (the C++ face's call).
Status run_in_thread_workspace(const core::ForwardProblem& problem, int num_threads);

}  // namespace mhc::ops::pre::forward

// The operator's hook for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(pre_forward, core::ForwardProblem, PreForward, pre::forward::validate,
                       pre::forward::run_in_thread_workspace)
