// MhcPreBackward's driver: for each chunk of tokens, phase 1 (per-token
// statistics, tokens split over the workers), phase 2 (column items split over
// the workers) and, for kernels that have it, phase 3 (grad_x row by row), with a
// barrier after each; the chunk's data stays in cache between the phases.
// Chunks are dealt to plan.lanes lanes in turn; with two or more workers the
// lanes run side by side, each on its own group of workers (lane l: workers l,
// l + lanes, ...), so that one lane's memory-bound phases overlap the other's
// column phase. Which worker does what never changes a result: a chunk's sums go
// to its lane's totals in chunk order whatever the grouping.
#include <algorithm>
#include <optional>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/kernel_views.hpp"
#include "ops/pre/backward_plan.hpp"
#include "ops/pre/backward.hpp"
#include "ops/staging.hpp"
#include "ops/streaming.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::pre::backward {
namespace {

const kernels::PreBackwardKernels& kernels_of(const core::BackwardProblem& problem) {
  return *implementation(problem.isa).pre_backward;
}

kernels::PreShape shape_of(const core::BackwardProblem& p) { return ops::shape_of(p.dims, p.x.dtype, p.hf32); }

// The operands that do not fit the kernels' views, staged (staging.hpp), and phi
// rounded to HF32 for an HF32 call.
Staging staging_of(core::BackwardProblem* p) {
  Staging staging;
  staging.add(&p->x, View::stream_rows, false);
  staging.add(&p->phi, View::matrix, false, p->hf32 ? Rounding::hf32 : Rounding::none);
  staging.add(&p->alpha, View::matrix, false);
  staging.add(&p->grad_h_in, View::stream_rows, false);
  staging.add(&p->grad_h_post, View::token_rows, false);
  staging.add(&p->grad_h_res, View::token_rows, false);
  staging.add(&p->inv_rms, View::token_rows, false);
  staging.add(&p->h_mix, View::token_rows, false);
  staging.add(&p->h_pre, View::token_rows, false);
  staging.add(&p->h_post, View::token_rows, false);
  staging.add(&p->gamma, View::matrix, false);
  staging.add(&p->grad_x_post, View::stream_rows, false);
  staging.add(&p->post_grad_out, View::stream_rows, false);
  staging.add(&p->post_h_res, View::token_rows, false);
  staging.add(&p->pre_mix, View::token_rows, false);
  staging.add(&p->grad_h_pre, View::token_rows, false);
  staging.add(&p->grad_pre_mix, View::token_rows, true);
  staging.add(&p->grad_x, View::stream_rows, true);
  staging.add(&p->grad_phi, View::matrix, true);
  staging.add(&p->grad_alpha, View::matrix, true);
  staging.add(&p->grad_bias, View::matrix, true);
  staging.add(&p->grad_gamma, View::matrix, true);
  return staging;
}

kernels::BackwardOperands operands_of(const core::BackwardProblem& p) {
  kernels::BackwardOperands o;
  o.shape = shape_of(p);
  o.hc_eps = p.hc_eps;
  o.x = stream_rows<const void>(p.x);
  o.phi = matrix<const float>(p.phi);
  o.gamma = matrix<const float>(p.gamma);
  o.alpha = static_cast<const float*>(p.alpha.data);
  o.grad_h_in = stream_rows<const void>(p.grad_h_in);
  o.grad_h_post = token_rows<const float>(p.grad_h_post);
  o.grad_h_res = token_rows<const float>(p.grad_h_res);
  o.inv_rms = token_rows<const float>(p.inv_rms);
  o.h_mix = token_rows<const float>(p.h_mix);
  o.h_pre = token_rows<const float>(p.h_pre);
  o.h_post = token_rows<const float>(p.h_post);
  o.grad_x_post = stream_rows<const void>(p.grad_x_post);
  if (p.grad_x_post.data != nullptr) o.grad_x_post_dtype = p.grad_x_post.dtype;
  o.post_grad_out = stream_rows<const void>(p.post_grad_out);
  o.post_h_res = token_rows<const float>(p.post_h_res);
  o.pre_mix = token_rows<const float>(p.pre_mix);
  o.grad_h_pre = token_rows<const float>(p.grad_h_pre);
  o.grad_pre_mix = token_rows<float>(p.grad_pre_mix);
  o.grad_h_pre_adds = p.grad_h_pre_adds;
  o.grad_x = stream_rows<void>(p.grad_x);
  o.grad_phi = matrix<float>(p.grad_phi);
  o.grad_gamma = matrix<float>(p.grad_gamma);
  o.grad_alpha = static_cast<float*>(p.grad_alpha.data);
  o.grad_bias = static_cast<float*>(p.grad_bias.data);
  o.streaming_stores = streaming_stores();
  return o;
}

void run_phases(const kernels::PreBackwardKernels& kernels, const kernels::BackwardOperands& operands, const Plan& plan,
                const Workspace& w) {
  const kernels::PreShape& d = operands.shape;
  const kernels::BackwardBuffers& buffers = w.buffers;
  std::fill(buffers.phi_total[0], buffers.gamma_total[plan.lanes - 1] + d.K, 0.0f);

  std::optional<runtime::Barrier> lane_barriers[kernels::kLanes];
  runtime::parallel_region(plan.threads, [&](int worker, int workers, runtime::Barrier& barrier) {
    const int lanes = plan.lanes;
    const bool side_by_side = lanes > 1 && workers >= lanes;
    const int groups = side_by_side ? lanes : 1;
    const int group = worker % groups, rank = worker / groups;
    auto group_size = [&](int g) { return (workers - g + groups - 1) / groups; };
    if (worker == 0)
      for (int g = 0; g < groups; ++g) lane_barriers[g].emplace(group_size(g));
    barrier.arrive_and_wait();
    runtime::Barrier& group_barrier = *lane_barriers[group];
    const int members = group_size(group);
    auto share = [&](int64_t count, int64_t* begin, int64_t* end) {
      *begin = count * rank / members;
      *end = count * (rank + 1) / members;
    };
    int64_t i0, i1;
    share(plan.column_items, &i0, &i1);
    for (int64_t chunk = group; chunk < plan.chunks; chunk += groups) {
      const kernels::BackwardStep step{&operands, &buffers, int(chunk % lanes), w.scratch(worker)};
      const int64_t c0 = chunk * kernels::kTokensPerChunk, c1 = std::min(d.T, c0 + kernels::kTokensPerChunk);
      int64_t t0, t1;
      share(c1 - c0, &t0, &t1);
      if (t1 > t0) kernels.token_stats(step, c0, c0 + t0, c0 + t1);
      group_barrier.arrive_and_wait();
      for (int64_t i = i0; i < i1; ++i) kernels.columns(step, c0, c1, plan.column_item(i, d.D));
      group_barrier.arrive_and_wait();
      if (kernels.rows) {
        if (t1 > t0) kernels.rows(step, c0, c0 + t0, c0 + t1);
        group_barrier.arrive_and_wait();
      }
    }
    barrier.arrive_and_wait();  // every lane's totals are complete
    const kernels::BackwardStep step{&operands, &buffers, 0, w.scratch(worker)};
    const int64_t f0 = plan.column_items * worker / workers, f1 = plan.column_items * (worker + 1) / workers;
    for (int64_t i = f0; i < f1; ++i) kernels.finish_columns(step, plan.column_item(i, d.D));
  });
  kernels.finish_sums({&operands, &buffers, 0, w.scratch(0)});
}

}  // namespace

size_t workspace_bytes(const core::BackwardProblem& problem, int num_threads) {
  core::BackwardProblem staged = problem;
  const Plan plan = make_plan(kernels_of(problem), shape_of(problem), resolve_threads(num_threads));
  return staging_of(&staged).workspace_bytes(plan.workspace_bytes);
}

Status run(const core::BackwardProblem& original, void* workspace, size_t workspace_bytes, int num_threads) {
  const kernels::PreBackwardKernels& kernels = kernels_of(original);
  const int threads = resolve_threads(num_threads);
  const Plan plan = make_plan(kernels, shape_of(original), threads);
  core::BackwardProblem problem = original;
  Staging staging = staging_of(&problem);
  if (Status s = workspace_error(staging.workspace_bytes(plan.workspace_bytes), workspace_bytes, workspace); !s.ok())
    return s;
  staging.gather(workspace, plan.workspace_bytes, threads);
  const kernels::BackwardOperands operands = operands_of(problem);
  if (kernels.serial) kernels.serial(operands);
  else run_phases(kernels, operands, plan, lay_out(plan, operands.shape, workspace));
  staging.scatter(threads);
  return {};
}

Status run_in_thread_workspace(const core::BackwardProblem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre::backward
