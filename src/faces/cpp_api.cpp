// The C++ face: validate, get a workspace, run. Nothing else.
#include <algorithm>
#include <string>

#include "kernels/kernels.hpp"
#include "mhc/mhc.hpp"
#include "ops/operators.hpp"
#include "runtime/workspace.hpp"

namespace mhc {

TensorView::TensorView(const void* ptr, DType type, std::initializer_list<int64_t> dims,
                       std::initializer_list<int64_t> element_strides)
    : data(const_cast<void*>(ptr)), dtype(type), rank(int32_t(dims.size())) {
  // Views of more than kMaxRank dims keep their rank so validation reports it.
  int i = 0;
  for (int64_t d : dims) if (i < kMaxRank) shape[i++] = d;
  i = 0;
  for (int64_t s : element_strides) if (i < kMaxRank) strides[i++] = s;
}

TensorView::TensorView(const void* ptr, DType type, std::initializer_list<int64_t> dims)
    : TensorView(ptr, type, dims, {}) {
  int64_t stride = 1;
  for (int i = std::min<int>(rank, kMaxRank) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i) n *= shape[i];
  return n;
}

namespace {

// Validated problem -> workspace (the calling thread's, reused across calls) -> run;
// an allocation failure is reported before any output is written.
template <class Problem, class SizeFn, class RunFn>
Status allocate_and_run(const Problem& problem, int threads, SizeFn size_of, RunFn run) {
  const size_t bytes = size_of(problem, threads);
  void* workspace = bytes > 0 ? runtime::thread_workspace(bytes) : nullptr;
  if (bytes > 0 && workspace == nullptr)
    return {StatusCode::runtime_error, ErrorKind::runtime,
            "workspace: could not allocate " + std::to_string(bytes) + " bytes"};
  return run(problem, workspace, bytes, threads);
}

}  // namespace

Status pre_forward(const PreForwardInputs& in, const PreForwardOutputs& out, const Options& options) {
  core::ForwardProblem problem;
  if (Status s = ops::validate_forward(in, out, options, &problem); !s.ok()) return s;
  return allocate_and_run(problem, options.num_threads, ops::forward_workspace_bytes, ops::run_forward);
}

Status pre_backward(const PreBackwardInputs& in, const PreBackwardOutputs& out,
                    const Options& options) {
  core::BackwardProblem problem;
  if (Status s = ops::validate_backward(in, out, options, &problem); !s.ok()) return s;
  return allocate_and_run(problem, options.num_threads, ops::backward_workspace_bytes, ops::run_backward);
}

const char* isa() { return kernels::selected_name(); }

}  // namespace mhc
