// MhcPost's driver: the call's kernels from the registry, the staging of tensors
// that do not fit the kernels' views, then items on the thread pool: blocks of
// tokens and columns for the forward, blocks of tokens for the backward (its
// sums over D run in one item). No reduction crosses tokens: any split gives the
// same bits.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/kernel_views.hpp"
#include "ops/post/post.hpp"
#include "ops/staging.hpp"
#include "ops/streaming.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::post {
namespace {

// About this many elements of x per item: enough to hide the pool's hand-off,
// few enough that two workers share a short call.
constexpr int64_t kItemElements = 16384;
constexpr int64_t kColumnChunk = 2048;  // a multiple of 64

const kernels::PostKernels& kernels_of(const core::PostProblem& p) { return *implementation(p.isa).post; }

kernels::PostShape shape_of(const core::PostProblem& p) {
  return {.T = p.dims.T, .N = p.dims.N, .D = p.dims.D, .x_dtype = p.x_dtype,
          .grad_x_dtype = p.grad_x.present() ? p.grad_x.dtype : p.x_dtype, .has_h_res = p.h_res.present()};
}

struct Plan {
  int threads = 1;
  int64_t columns = 0, column_chunks = 1;  // forward: columns per item
  int64_t item_tokens = 1, token_groups = 0;
  int64_t scratch_floats = 0;  // per worker, a multiple of 16
  int64_t items() const { return token_groups * column_chunks; }
  size_t bytes() const { return size_t(threads) * size_t(scratch_floats) * sizeof(float); }
};

Plan make_plan(const core::PostProblem& p, bool forward, int num_threads) {
  const kernels::PostKernels& k = kernels_of(p);
  const kernels::PostShape shape = shape_of(p);
  Plan plan;
  plan.threads = resolve_threads(num_threads);
  plan.columns = forward ? std::min(p.dims.D, kColumnChunk) : p.dims.D;
  plan.column_chunks = kernels::ceil_div(p.dims.D, plan.columns);
  // The backward's N = 4 kernels take tokens two at a time (kernels/simd/post.cpp).
  plan.item_tokens = std::max<int64_t>(forward ? 1 : 2, kItemElements / (p.dims.N * plan.columns));
  plan.token_groups = kernels::ceil_div(p.dims.T, plan.item_tokens);
  plan.scratch_floats = kernels::align16(forward ? k.forward_scratch_floats(shape) : k.backward_scratch_floats(shape));
  return plan;
}

kernels::PostForwardOperands forward_operands(const core::PostProblem& p) {
  kernels::PostForwardOperands o;
  o.shape = shape_of(p);
  o.x = stream_rows<const void>(p.x);
  o.h_res = token_rows<const float>(p.h_res);
  o.h_out = stream_rows<const void>(p.h_out);
  o.h_post = token_rows<const float>(p.h_post);
  o.out = stream_rows<void>(p.out);
  o.streaming_stores = streaming_stores();
  return o;
}

Staging staging_of(core::PostProblem* p, bool forward) {
  Staging staging;
  if (p->dims.T == 0) return staging;
  staging.add(&p->x, View::stream_rows, false);
  staging.add(&p->h_res, View::token_rows, false);
  staging.add(&p->h_out, View::stream_rows, false);
  staging.add(&p->h_post, View::token_rows, false);
  if (forward) {
    staging.add(&p->out, View::stream_rows, true);
  } else {
    staging.add(&p->grad_out, View::stream_rows, false);
    staging.add(&p->grad_x, View::stream_rows, true);
    staging.add(&p->grad_h_res, View::token_rows, true);
    staging.add(&p->grad_h_out, View::stream_rows, true);
    staging.add(&p->grad_h_post, View::token_rows, true);
  }
  return staging;
}

size_t workspace_bytes(const core::PostProblem& problem, bool forward, int num_threads) {
  core::PostProblem staged = problem;
  return staging_of(&staged, forward).workspace_bytes(make_plan(problem, forward, num_threads).bytes());
}

template <class Body>
Status run(const core::PostProblem& original, bool forward, void* workspace, size_t workspace_bytes, int num_threads,
           Body&& body) {
  const Plan plan = make_plan(original, forward, num_threads);
  core::PostProblem p = original;
  Staging staging = staging_of(&p, forward);
  if (Status s = workspace_error(staging.workspace_bytes(plan.bytes()), workspace_bytes, workspace); !s.ok()) return s;
  if (p.dims.T == 0) return {};
  staging.gather(workspace, plan.bytes(), plan.threads);
  float* scratch = static_cast<float*>(workspace);
  runtime::parallel_for(plan.items(), plan.threads, [&](int64_t item, int worker) {
    const int64_t group = item / plan.column_chunks, chunk = item % plan.column_chunks;
    const int64_t t0 = group * plan.item_tokens, d0 = chunk * plan.columns;
    body(p, scratch + worker * plan.scratch_floats, t0, std::min(p.dims.T, t0 + plan.item_tokens), d0,
         std::min(p.dims.D, d0 + plan.columns));
  });
  staging.scatter(plan.threads);
  return {};
}

}  // namespace

size_t forward_workspace_bytes(const core::PostProblem& problem, int num_threads) {
  return workspace_bytes(problem, true, num_threads);
}
size_t backward_workspace_bytes(const core::PostProblem& problem, int num_threads) {
  return workspace_bytes(problem, false, num_threads);
}

Status run_forward(const core::PostProblem& problem, void* workspace, size_t bytes, int num_threads) {
  const kernels::PostKernels& k = kernels_of(problem);
  return run(problem, true, workspace, bytes, num_threads,
             [&](const core::PostProblem& p, float* scratch, int64_t t0, int64_t t1, int64_t d0, int64_t d1) {
               k.forward(forward_operands(p), scratch, t0, t1, d0, d1);
             });
}

Status run_backward(const core::PostProblem& problem, void* workspace, size_t bytes, int num_threads) {
  const kernels::PostKernels& k = kernels_of(problem);
  return run(problem, false, workspace, bytes, num_threads,
             [&](const core::PostProblem& p, float* scratch, int64_t t0, int64_t t1, int64_t, int64_t) {
               kernels::PostBackwardOperands o;
               o.shape = shape_of(p);
               o.grad_out = stream_rows<const void>(p.grad_out);
               o.x = stream_rows<const void>(p.x);
               o.h_res = token_rows<const float>(p.h_res);
               o.h_out = stream_rows<const void>(p.h_out);
               o.h_post = token_rows<const float>(p.h_post);
               o.grad_x = stream_rows<void>(p.grad_x);
               o.grad_h_res = token_rows<float>(p.grad_h_res);
               o.grad_h_out = stream_rows<void>(p.grad_h_out);
               o.grad_h_post = token_rows<float>(p.grad_h_post);
               o.streaming_stores = streaming_stores();
               k.backward(o, scratch, t0, t1);
             });
}

bool fits_in_place(const core::PostProblem& problem) {
  core::PostProblem p = problem;
  return !staging_of(&p, true).any();
}

int64_t forward_tokens_scratch_floats(const core::PostProblem& problem) {
  return kernels::align16(kernels_of(problem).forward_scratch_floats(shape_of(problem)));
}

void forward_tokens(const core::PostProblem& p, float* scratch, int64_t t0, int64_t t1) {
  const kernels::PostForwardOperands o = forward_operands(p);
  for (int64_t d0 = 0; d0 < p.dims.D; d0 += kColumnChunk)
    kernels_of(p).forward(o, scratch, t0, t1, d0, std::min(p.dims.D, d0 + kColumnChunk));
}

Status run_forward_in_thread_workspace(const core::PostProblem& problem, int num_threads) {
  return in_thread_workspace(forward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}
Status run_backward_in_thread_workspace(const core::PostProblem& problem, int num_threads) {
  return in_thread_workspace(backward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_backward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::post
