// aclnnMhcSinkhorn: MhcSinkhorn (SPEC §10) behind CANN's two-phase API.
// Order of the checks (CANN's op_api): workspaceSize and executor -> NULL x,
// output -> the cache form (both caches NULL or of one element: none; both
// given: both; one of each: 161002) -> dtypes -> shapes (output is x's shape,
// numIters, x's rank, x's last two dims) -> formats (output and the caches
// share x's) -> empty x (161002). Then what CANN does not check (the caches'
// element counts and layout, storage, offsets, strides, NULL data, overlap,
// size limits): mhc::ops::sinkhorn::validate_forward, which also makes the
// problem. The caches are this library's (SPEC §10): any shape of 2·I·T·N·Nₐ
// and 2·I·T·Nₐ floats, handed to the core as [2I,..,N,Nₐ] and [2I,..,Nₐ].
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "faces/aclnn/face.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc::faces::aclnn {
namespace {

struct SinkhornArgs {
  TensorArg x;
  float eps;
  int64_t num_iters;
  TensorArg output, norm_out, sum_out;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// The core's names in this operator's messages.
// A cache argument that stands for "no cache": NULL, or a live tensor of one
// element (the placeholder a caller without caches passes).
bool no_cache(const TensorArg& arg) {
  TensorInfo t;
  return arg.tensor == nullptr || (tensor_info(arg.tensor, &t) && element_count(t.dims) == 1);
}

// CANN's checks, in CANN's order. *caches: normOut and sumOut are given.
aclnnStatus check_forward(const Checks& c, const SinkhornArgs& a, bool* caches) {
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  for (const TensorArg& t : {a.x, a.output}) ACLNN_RETURN_IF_ERROR(c.not_null(t));

  const bool no_norm = no_cache(a.norm_out), no_sum = no_cache(a.sum_out);
  if (no_norm != no_sum) {
    auto state = [](const TensorArg& t, bool none) {
      return std::string(t.name) + (t.tensor == nullptr ? " NULL" : none ? " of one element (none)" : " given");
    };
    return c.fail(ACLNN_ERR_PARAM_INVALID,
                  "the caches normOut, sumOut come both or neither (both NULL or both of one element: none); got " +
                      state(a.norm_out, no_norm) + ", " + state(a.sum_out, no_sum));
  }
  *caches = !no_norm;

  ACLNN_RETURN_IF_ERROR(c.dtype(a.x, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.output, ACL_FLOAT));
  if (*caches)
    for (const TensorArg& t : {a.norm_out, a.sum_out}) ACLNN_RETURN_IF_ERROR(c.dtype(t, ACL_FLOAT));

  TensorInfo x;
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  ACLNN_RETURN_IF_ERROR(c.shape(a.output, {{x.dims, {}, "", dims_text(x.dims) + " (x's shape)"}}));
  ACLNN_RETURN_IF_ERROR(c.num_iters(a.num_iters));
  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  const TokenDims t = token_dims(x.dims);  // N is the last dim, D the one before it
  ACLNN_RETURN_IF_ERROR(c.shape(a.x, {t.per_token({"N", "N"}, {t.D, t.D})}));

  ACLNN_RETURN_IF_ERROR(c.format(a.x));
  std::vector<TensorArg> formatted = {a.output};
  if (*caches) formatted.insert(formatted.end(), {a.norm_out, a.sum_out});
  for (const TensorArg& f : formatted) {
    ACLNN_RETURN_IF_ERROR(c.format(f));
    ACLNN_RETURN_IF_ERROR(c.same_format(f, a.x));
  }

  return c.not_empty(a.x);
}

aclnnStatus forward_workspace(const char* op, const char* run_op, const SinkhornArgs& a) {
  const Checks c(op);
  bool caches = false;
  ACLNN_RETURN_IF_ERROR(check_forward(c, a, &caches));

  SinkhornForwardInputs in;
  SinkhornForwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.z));
  in.eps = a.eps;  // float in CANN's signature, widened exactly
  in.num_iters = a.num_iters;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.output, &out.h_res));
  // Caches of one element (none) are not looked at and left untouched.
  if (caches) {
    TensorInfo x;
    ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
    const SinkhornCacheDims dims = sinkhorn_cache_dims(token_dims(x.dims), a.num_iters);
    TensorView norm, sum;
    ACLNN_RETURN_IF_ERROR(to_cache_view(op, a.norm_out, dims.norm, &norm));
    ACLNN_RETURN_IF_ERROR(to_cache_view(op, a.sum_out, dims.sum, &sum));
    out.norm_out = norm;
    out.sum_out = sum;
  }

  core::SinkhornProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op, ops::sinkhorn::validate_forward(in, out, Options{}, &problem, ops::sinkhorn::Rules{.eps_values = false})));
  const size_t bytes = ops::sinkhorn::forward_workspace_bytes(problem);
  return create_executor(run_op, SinkhornForward{problem}, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcSinkhornGetWorkspaceSize(const aclTensor* x, float eps, int64_t numIters, aclTensor* output,
                                             aclTensor* normOut, aclTensor* sumOut, uint64_t* workspaceSize,
                                             aclOpExecutor** executor) {
  static const char* op = "aclnnMhcSinkhornGetWorkspaceSize";
  return guarded(op, [&] {
    return forward_workspace(op, "aclnnMhcSinkhorn",
                             SinkhornArgs{{"x", x}, eps, numIters, {"output", output}, {"normOut", normOut},
                                          {"sumOut", sumOut}, workspaceSize, executor});
  });
}

aclnnStatus aclnnMhcSinkhorn(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  return guarded("aclnnMhcSinkhorn",
                 [&] { return run_executor("aclnnMhcSinkhorn", workspace, workspaceSize, executor, stream); });
}

}  // extern "C"
