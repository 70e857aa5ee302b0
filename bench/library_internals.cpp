// The one file of mhc-bench that uses the library's internal headers (src/):
//   - the workspace a call will use, asked of the operator layer (validate ->
//     size), the same two calls the C++ face makes before it gets the workspace;
//   - dropping the calling thread's reused workspace buffer (if this version of
//     the library keeps one), so each shape's extra memory is measured from zero
//     instead of from what an earlier, larger shape left behind.
#include "ops/operators.hpp"
#include "operator_cases.hpp"
#if __has_include("runtime/workspace.hpp")
#include "runtime/workspace.hpp"
#define MHC_BENCH_HAS_THREAD_WORKSPACE 1
#endif

namespace mhc_bench {

int64_t expected_forward_workspace(const ShapeBuffers& b, int threads) {
  mhc::Options options;
  options.num_threads = threads;
  mhc::core::ForwardProblem problem;
  if (!mhc::ops::validate_forward(b.forward_inputs(), b.forward_outputs(), options, &problem).ok())
    return -1;
  return int64_t(mhc::ops::forward_workspace_bytes(problem, threads));
}

int64_t expected_backward_workspace(const ShapeBuffers& b, int threads) {
  mhc::Options options;
  options.num_threads = threads;
  mhc::core::BackwardProblem problem;
  if (!mhc::ops::validate_backward(b.backward_inputs(), b.backward_outputs(), options, &problem).ok())
    return -1;
  return int64_t(mhc::ops::backward_workspace_bytes(problem, threads));
}

bool release_library_workspace() {
#ifdef MHC_BENCH_HAS_THREAD_WORKSPACE
  mhc::runtime::release_thread_workspace();
  return true;
#else
  return false;  // this library allocates its workspace per call: nothing retained
#endif
}

}  // namespace mhc_bench
