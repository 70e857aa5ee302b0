// aclnnMhcSinkhornBackward: MhcSinkhornBackward (SPEC §10) behind CANN's
// two-phase API, from the caches aclnnMhcSinkhorn wrote. Order of the checks
// (CANN's op_api): workspaceSize and executor -> NULL gradOutput, normOut,
// sumOut, out -> dtypes -> shapes (out is gradOutput's shape, gradOutput's
// rank and last two dims) -> formats (out shares gradOutput's) -> an empty
// gradOutput: success, and the run does nothing. Then what CANN does not check
// (the iteration count the caches' sizes give, their layout and formats,
// storage, offsets, strides, NULL data, overlap, size limits):
// mhc::ops::sinkhorn::validate_backward, which also makes the problem.
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "faces/aclnn/face.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc::faces::aclnn {
namespace {

struct SinkhornBackwardArgs {
  TensorArg grad_output, norm_out, sum_out, out;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// CANN's checks, in CANN's order. *empty: gradOutput is empty (nothing to run).
aclnnStatus check_backward(const Checks& c, const SinkhornBackwardArgs& a, bool* empty) {
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  for (const TensorArg& t : {a.grad_output, a.norm_out, a.sum_out, a.out}) ACLNN_RETURN_IF_ERROR(c.not_null(t));
  for (const TensorArg& t : {a.grad_output, a.norm_out, a.sum_out, a.out}) ACLNN_RETURN_IF_ERROR(c.dtype(t, ACL_FLOAT));

  TensorInfo g;
  ACLNN_RETURN_IF_ERROR(c.info(a.grad_output, &g));
  ACLNN_RETURN_IF_ERROR(c.shape(a.out, {{g.dims, {}, "", dims_text(g.dims) + " (gradOutput's shape)"}}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_output, {3, 4}));
  const TokenDims t = token_dims(g.dims);
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_output, {t.per_token({"N", "N"}, {t.D, t.D})}));

  for (const TensorArg& f : {a.grad_output, a.out}) ACLNN_RETURN_IF_ERROR(c.format(f));
  ACLNN_RETURN_IF_ERROR(c.same_format(a.out, a.grad_output));

  *empty = element_count(g.dims) == 0;
  return ACLNN_SUCCESS;
}

// The iteration count the caches' sizes give: numel(normOut) = 2·I·T·N·Nₐ and
// numel(sumOut) = 2·I·T·Nₐ with I >= 1 (T > 0: gradOutput is not empty).
aclnnStatus cache_iterations(const Checks& c, const SinkhornBackwardArgs& a, const TokenDims& t, int64_t* iterations) {
  TensorInfo norm, sum;
  ACLNN_RETURN_IF_ERROR(c.info(a.norm_out, &norm));
  ACLNN_RETURN_IF_ERROR(c.info(a.sum_out, &sum));
  const SinkhornCacheDims one = sinkhorn_cache_dims(t, 1);  // the floats of two steps (one iteration)
  const int64_t norm_step = element_count(one.norm), sum_step = element_count(one.sum);
  const int64_t norm_count = element_count(norm.dims), sum_count = element_count(sum.dims);
  if (norm_step == INT64_MAX || norm_count == 0 || norm_count % norm_step != 0)
    return c.fail(ACLNN_ERR_PARAM_INVALID,
                  "normOut: expected 2*I*T*N*Na floats (T=" +
                      std::to_string(element_count({t.lead.begin(), t.lead.end()})) + ", N=" + std::to_string(t.N) +
                      ", Na=" + std::to_string(one.pitch) + "; a multiple of " + std::to_string(norm_step) +
                      "), got " + std::to_string(norm_count) + " " + dims_text(norm.dims));
  *iterations = norm_count / norm_step;
  const int64_t sum_expected = element_count({sum_step, *iterations});
  if (sum_count != sum_expected)
    return c.fail(ACLNN_ERR_PARAM_INVALID, "sumOut: expected 2*I*T*Na = " + std::to_string(sum_expected) +
                                               " floats (I=" + std::to_string(*iterations) + " from normOut), got " +
                                               std::to_string(sum_count) + " " + dims_text(sum.dims));
  return ACLNN_SUCCESS;
}

aclnnStatus backward_workspace(const char* op, const char* run_op, const SinkhornBackwardArgs& a) {
  const Checks c(op);
  bool empty = false;
  ACLNN_RETURN_IF_ERROR(check_backward(c, a, &empty));
  if (empty) return create_executor(run_op, NothingToRun{}, 0, a.workspace_size, a.executor);

  TensorInfo g;
  ACLNN_RETURN_IF_ERROR(c.info(a.grad_output, &g));
  const TokenDims t = token_dims(g.dims);
  int64_t iterations = 0;
  ACLNN_RETURN_IF_ERROR(cache_iterations(c, a, t, &iterations));

  SinkhornBackwardInputs in;
  SinkhornBackwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_output, &in.grad_h_res));
  const SinkhornCacheDims dims = sinkhorn_cache_dims(t, iterations);
  TensorView norm, sum;
  ACLNN_RETURN_IF_ERROR(to_cache_view(op, a.norm_out, dims.norm, &norm));
  ACLNN_RETURN_IF_ERROR(to_cache_view(op, a.sum_out, dims.sum, &sum));
  in.norm_out = norm;
  in.sum_out = sum;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.out, &out.grad_z));

  core::SinkhornProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op, ops::sinkhorn::validate_backward(in, out, Options{}, &problem, ops::sinkhorn::Rules{.eps_values = false})));
  const size_t bytes = ops::sinkhorn::backward_workspace_bytes(problem);
  return create_executor(run_op, SinkhornBackward{problem}, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcSinkhornBackwardGetWorkspaceSize(const aclTensor* gradOutput, const aclTensor* normOut,
                                                     const aclTensor* sumOut, aclTensor* out,
                                                     uint64_t* workspaceSize, aclOpExecutor** executor) {
  static const char* op = "aclnnMhcSinkhornBackwardGetWorkspaceSize";
  return guarded(op, [&] {
    return backward_workspace(op, "aclnnMhcSinkhornBackward",
                              SinkhornBackwardArgs{{"gradOutput", gradOutput}, {"normOut", normOut},
                                                   {"sumOut", sumOut}, {"out", out}, workspaceSize, executor});
  });
}

aclnnStatus aclnnMhcSinkhornBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                     aclrtStream stream) {
  return guarded("aclnnMhcSinkhornBackward", [&] {
    return run_executor("aclnnMhcSinkhornBackward", workspace, workspaceSize, executor, stream);
  });
}

}  // extern "C"
