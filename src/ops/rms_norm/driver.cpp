// MhcRmsNorm's driver: the staging of tensors that do not fit the kernel's
// views, then blocks of tokens on the thread pool, each token by the
// microkernel (kernels/rms_norm.hpp). No reduction crosses tokens: any split
// gives the same bits.
#include <algorithm>

#include "kernels/rms_norm.hpp"
#include "ops/call_resources.hpp"
#include "ops/kernel_views.hpp"
#include "ops/rms_norm/rms_norm.hpp"
#include "ops/staging.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::rms_norm {
namespace {

// About this many elements per item: enough to hide the pool's hand-off.
constexpr int64_t kItemElements = 16384;

Staging staging_of(Problem* p) {
  Staging staging;
  if (p->dims.T == 0) return staging;
  staging.add(&p->x, View::stream_rows, false);
  staging.add(&p->weight, View::matrix, false);
  staging.add(&p->y, View::stream_rows, true);
  return staging;
}

void* element(const core::Strided& s, int64_t offset) {
  return static_cast<char*>(s.data) + offset * core::element_size(s.dtype);
}

}  // namespace

size_t workspace_bytes(const Problem& problem, int /*num_threads*/) {
  Problem p = problem;
  return staging_of(&p).workspace_bytes(0);
}

Status run_forward(const Problem& original, void* workspace, size_t bytes, int num_threads) {
  const int threads = resolve_threads(num_threads);
  Problem p = original;
  Staging staging = staging_of(&p);
  if (Status s = workspace_error(staging.workspace_bytes(0), bytes, workspace); !s.ok()) return s;
  const int64_t T = p.dims.T, D = p.dims.D;
  if (T == 0) return {};
  staging.gather(workspace, 0, threads);
  const auto x = stream_rows<const void>(p.x);
  const auto y = stream_rows<void>(p.y);
  const int64_t per_item = std::max<int64_t>(1, kItemElements / D), items = (T + per_item - 1) / per_item;
  runtime::parallel_for(items, int(std::min<int64_t>(threads, items)), [&](int64_t item, int) {
    for (int64_t t = item * per_item; t < std::min(T, (item + 1) * per_item); ++t)
      kernels::rms_norm_token(element(p.x, x.at(t, 0)), p.x_dtype, p.weight.data, p.weight.dtype, p.eps, D,
                              element(p.y, y.at(t, 0)));
  });
  staging.scatter(threads);
  return {};
}

Status run_forward_in_thread_workspace(const Problem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::rms_norm
