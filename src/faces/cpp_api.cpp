// The C++ face: validate, get a workspace, run. Nothing else.
#include <algorithm>
#include <cstdint>
#include <string>

#include "faces/guarded.hpp"
#include "mhc/mhc.hpp"
#include "ops/isa.hpp"
#include "ops/pre_backward/pre_backward.hpp"
#include "ops/pre_forward/pre_forward.hpp"
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
  // Saturated where the product overflows: validation then rejects the view
  // (its element count or extent overflows) instead of the constructor
  // overflowing a signed integer.
  int64_t stride = 1;
  for (int i = std::min<int>(rank, kMaxRank) - 1; i >= 0; --i) {
    strides[i] = stride;
    if (__builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
  }
}

// INT64_MAX when the product overflows (negative dims are multiplied as given).
int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i)
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;
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

// The float64 reference allocates its own memory, and may find none before it
// writes anything: out of memory is a runtime error, outputs untouched.
template <class Body>
Status no_throw(Body&& body) {
  return faces::guarded(body, [](bool out_of_memory, const char* what) -> Status {
    if (out_of_memory) return {StatusCode::runtime_error, ErrorKind::runtime, "out of memory"};
    return {StatusCode::internal_error, ErrorKind::runtime,
            std::string("internal error: ") + (what != nullptr ? what : "unknown exception")};
  });
}

}  // namespace

Status pre_forward(const PreForwardInputs& in, const PreForwardOutputs& out, const Options& options) {
  return no_throw([&] {
    core::ForwardProblem problem;
    if (Status s = ops::pre_forward::validate(in, out, options, &problem); !s.ok()) return s;
    return allocate_and_run(problem, options.num_threads, ops::pre_forward::workspace_bytes, ops::pre_forward::run);
  });
}

Status pre_backward(const PreBackwardInputs& in, const PreBackwardOutputs& out,
                    const Options& options) {
  return no_throw([&] {
    core::BackwardProblem problem;
    if (Status s = ops::pre_backward::validate(in, out, options, &problem); !s.ok()) return s;
    return allocate_and_run(problem, options.num_threads, ops::pre_backward::workspace_bytes,
                            ops::pre_backward::run);
  });
}

const char* isa() { return ops::default_isa_name(); }
Status set_isa(Isa isa) {
  return no_throw([&] { return ops::set_default_isa(isa); });
}
Status set_isa(const char* name) {
  return no_throw([&] { return ops::set_default_isa(name); });
}
bool isa_available(Isa isa) { return ops::runs_here(isa); }
const char* isa_name(Isa isa) { return ops::name_of(isa); }

}  // namespace mhc
