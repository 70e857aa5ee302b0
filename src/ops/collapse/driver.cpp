// MhcCollapse's driver: the staging of tensors that do not fit the kernels'
// views, then blocks of tokens on the thread pool, each token by the
// microkernels (kernels/collapse.hpp). No reduction crosses tokens: any split
// gives the same bits.
#include <algorithm>

#include "kernels/collapse.hpp"
#include "kernels/pre_forward.hpp"  // align16
#include "ops/call_resources.hpp"
#include "ops/collapse/collapse.hpp"
#include "ops/kernel_views.hpp"
#include "ops/staging.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::collapse {
namespace {

// About this many elements of x per item: enough to hide the pool's hand-off,
// few enough that two workers share a short call.
constexpr int64_t kItemElements = 16384;

int64_t item_tokens(const core::Dims& d) { return std::max<int64_t>(1, kItemElements / std::max<int64_t>(1, d.K)); }
int64_t scratch_floats(const core::Dims& d) { return kernels::align16(d.D); }

Staging staging_of(Problem* p, bool forward) {
  Staging staging;
  if (p->dims.T == 0) return staging;
  staging.add(&p->x, View::stream_rows, false);
  staging.add(&p->pre_mix, View::token_rows, false);
  if (forward) {
    staging.add(&p->h, View::stream_rows, true);
  } else {
    staging.add(&p->grad_h, View::stream_rows, false);
    staging.add(&p->grad_x, View::stream_rows, true);
    staging.add(&p->grad_pre_mix, View::token_rows, true);
  }
  return staging;
}

size_t plan_bytes(const core::Dims& d, int threads) {
  return size_t(threads) * size_t(scratch_floats(d)) * sizeof(float);
}

template <class TokenFn>
Status run(const Problem& original, bool forward, void* workspace, size_t bytes, int num_threads, TokenFn token) {
  const int threads = resolve_threads(num_threads);
  Problem p = original;
  Staging staging = staging_of(&p, forward);
  const size_t plan = plan_bytes(p.dims, threads);
  if (Status s = workspace_error(staging.workspace_bytes(plan), bytes, workspace); !s.ok()) return s;
  const int64_t T = p.dims.T;
  if (T == 0) return {};
  staging.gather(workspace, plan, threads);
  float* scratch = static_cast<float*>(workspace);
  const int64_t per_item = item_tokens(p.dims), items = (T + per_item - 1) / per_item;
  runtime::parallel_for(items, threads, [&](int64_t item, int worker) {
    float* own = scratch + worker * scratch_floats(p.dims);
    for (int64_t t = item * per_item; t < std::min(T, (item + 1) * per_item); ++t) token(p, t, own);
  });
  staging.scatter(threads);
  return {};
}

// Element `offset` of a tensor in x's dtype (an input's converts to const void*).
void* element(const core::Strided& s, DType dtype, int64_t offset) {
  return static_cast<char*>(s.data) + offset * core::element_size(dtype);
}

}  // namespace

size_t workspace_bytes(const Problem& problem, bool forward, int num_threads) {
  Problem p = problem;
  return staging_of(&p, forward).workspace_bytes(plan_bytes(p.dims, resolve_threads(num_threads)));
}

Status run_forward(const Problem& problem, void* workspace, size_t bytes, int num_threads) {
  return run(problem, true, workspace, bytes, num_threads, [](const Problem& p, int64_t t, float* scratch) {
    const auto x = stream_rows<const void>(p.x);
    const auto h = stream_rows<void>(p.h);
    const auto w = token_rows<const float>(p.pre_mix);
    kernels::collapse_token(element(p.x, p.x_dtype, x.at(t, 0)), x.stream_stride, p.x_dtype, w.at(t), p.dims.N,
                            p.dims.D, element(p.h, p.x_dtype, h.at(t, 0)), scratch);
  });
}

Status run_backward(const Problem& problem, void* workspace, size_t bytes, int num_threads) {
  return run(problem, false, workspace, bytes, num_threads, [](const Problem& p, int64_t t, float* scratch) {
    const auto x = stream_rows<const void>(p.x);
    const auto grad_h = stream_rows<const void>(p.grad_h);
    const auto grad_x = stream_rows<void>(p.grad_x);
    kernels::collapse_backward_token(element(p.grad_h, p.x_dtype, grad_h.at(t, 0)),
                                     element(p.x, p.x_dtype, x.at(t, 0)), x.stream_stride, p.x_dtype,
                                     token_rows<const float>(p.pre_mix).at(t), p.dims.N, p.dims.D,
                                     element(p.grad_x, p.x_dtype, grad_x.at(t, 0)), grad_x.stream_stride,
                                     token_rows<float>(p.grad_pre_mix).at(t), scratch);
  });
}

Status run_forward_in_thread_workspace(const Problem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, true, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}

Status run_backward_in_thread_workspace(const Problem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, false, num_threads), [&](void* workspace, size_t bytes) {
    return run_backward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::collapse
