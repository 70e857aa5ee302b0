// MhcPre's driver: the call's kernels from the registry, its plan, the staging
// of tensors that do not fit the kernels' views, then the preparation's parts
// and the token items on the thread pool.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/kernel_views.hpp"
#include "ops/pre_forward/plan.hpp"
#include "ops/pre_forward/pre_forward.hpp"
#include "ops/staging.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::pre_forward {
namespace {

static_assert(kernels::kMaxPrepareParts >= runtime::kMaxThreads, "a prepare part per thread");

kernels::PreShape shape_of(const core::ForwardProblem& p) { return ops::shape_of(p.dims, p.x.dtype, p.hf32); }

// The table that runs the call: the entry's own, or its base for the calls the
// own one does not apply to; and the finish its items end with.
struct Selected {
  const kernels::PreForwardKernels* kernels;
  kernels::FinishTokens finish;
};
Selected select(const core::ForwardProblem& problem) {
  const kernels::Implementation& entry = implementation(problem.isa);
  const kernels::PreForwardKernels* own = entry.pre_forward;
  const kernels::PreForwardKernels* base = entry.pre_forward_base;
  if (base == nullptr) return {own, nullptr};
  if (own->applies && !own->applies(shape_of(problem))) return {base, nullptr};
  return {own, base->finish_tokens};
}

// The operands that do not fit the kernels' views, staged (staging.hpp), and phi
// rounded to HF32 for an HF32 call. None for an empty batch, of which nothing is read.
Staging staging_of(core::ForwardProblem* p) {
  Staging staging;
  if (p->dims.T == 0) return staging;
  staging.add(&p->x, View::stream_rows, false);
  staging.add(&p->phi, View::matrix, false, p->hf32 ? Rounding::hf32 : Rounding::none);
  staging.add(&p->alpha, View::matrix, false);
  staging.add(&p->bias, View::matrix, false);
  staging.add(&p->gamma, View::matrix, false);
  staging.add(&p->h_in, View::stream_rows, true);
  staging.add(&p->h_post, View::token_rows, true);
  staging.add(&p->h_res, View::token_rows, true);
  staging.add(&p->inv_rms, View::token_rows, true);
  staging.add(&p->h_mix, View::token_rows, true);
  staging.add(&p->h_pre, View::token_rows, true);
  return staging;
}

kernels::ForwardOperands operands_of(const core::ForwardProblem& p) {
  kernels::ForwardOperands o;
  o.shape = shape_of(p);
  o.norm_eps = p.norm_eps;
  o.hc_eps = p.hc_eps;
  o.x = stream_rows<const void>(p.x);
  o.phi = matrix<const float>(p.phi);
  o.gamma = matrix<const float>(p.gamma);
  o.alpha = static_cast<const float*>(p.alpha.data);
  o.bias = static_cast<const float*>(p.bias.data);
  o.h_in = stream_rows<void>(p.h_in);
  o.h_post = token_rows<float>(p.h_post);
  o.h_res = token_rows<float>(p.h_res);
  o.inv_rms = token_rows<float>(p.inv_rms);
  o.h_mix = token_rows<float>(p.h_mix);
  o.h_pre = token_rows<float>(p.h_pre);
  return o;
}

}  // namespace

size_t workspace_bytes(const core::ForwardProblem& problem, int num_threads) {
  core::ForwardProblem staged = problem;
  const Plan plan = make_plan(*select(problem).kernels, shape_of(problem), resolve_threads(num_threads));
  return staging_of(&staged).workspace_bytes(plan.workspace_bytes);
}

Status run(const core::ForwardProblem& original, void* workspace, size_t workspace_bytes, int num_threads) {
  const Selected selected = select(original);
  const kernels::PreForwardKernels& kernels = *selected.kernels;
  const int threads = resolve_threads(num_threads);
  const Plan plan = make_plan(kernels, shape_of(original), threads);
  core::ForwardProblem problem = original;
  Staging staging = staging_of(&problem);
  if (Status s = workspace_error(staging.workspace_bytes(plan.workspace_bytes), workspace_bytes, workspace); !s.ok())
    return s;
  const int64_t T = problem.dims.T;
  if (T == 0) return {};
  staging.gather(workspace, plan.workspace_bytes, threads);
  const kernels::ForwardOperands operands = operands_of(problem);
  const Workspace w = lay_out(plan, workspace);
  if (plan.prepare_parts > 0)
    runtime::parallel_for(plan.prepare_parts, plan.prepare_parts, [&](int64_t part, int worker) {
      w.prepared.finite[part] =
          kernels.prepare(operands, w.prepared.data, part, plan.prepare_parts, w.scratch(worker)) ? 1 : 0;
    });
  if (kernels.serial) {
    kernels.tokens({&operands, w.scratch_base, &w.prepared, selected.finish}, 0, T);
  } else {
    runtime::parallel_for(plan.items, plan.threads, [&](int64_t item, int worker) {
      const int64_t t0 = item * plan.item_tokens;
      kernels.tokens({&operands, w.scratch(worker), &w.prepared, selected.finish}, t0,
                     std::min(T, t0 + plan.item_tokens));
    });
  }
  staging.scatter(threads);
  return {};
}

Status run_in_thread_workspace(const core::ForwardProblem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre_forward
