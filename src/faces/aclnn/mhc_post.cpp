// aclnnMhcPost: MhcPost (SPEC §11) behind CANN's two-phase API.
// Order of the checks (CANN's op_api): workspaceSize and executor -> NULL
// required tensors (x, hOut, hPost, out; hRes may be NULL) -> formats of x and
// out -> dtypes -> x's rank, then the others' ranks -> shapes, with N and D
// from x -> empty inputs: success, and the run does nothing. Then what CANN
// does not check (the other formats, storage, offsets, strides, NULL data,
// overlap, size limits): mhc::ops::post::validate_forward, which also makes
// the problem.
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_post.h"
#include "faces/aclnn/face.hpp"
#include "ops/post/post.hpp"

namespace mhc::faces::aclnn {
namespace {

struct PostArgs {
  TensorArg x, h_res, h_out, h_post, out;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// CANN's checks, in CANN's order. *empty: an input is empty (nothing to run).
aclnnStatus check_forward(const Checks& c, const PostArgs& a, bool* empty) {
  const bool residual = a.h_res.tensor != nullptr;
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  for (const TensorArg& t : {a.x, a.h_out, a.h_post, a.out}) ACLNN_RETURN_IF_ERROR(c.not_null(t));

  for (const TensorArg& t : {a.x, a.out}) ACLNN_RETURN_IF_ERROR(c.format(t));

  TensorInfo x;
  ACLNN_RETURN_IF_ERROR(c.x_dtype(a.x));
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  if (residual) ACLNN_RETURN_IF_ERROR(c.dtype(a.h_res, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_out, x.dtype, " (x's dtype)"));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_post, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.out, x.dtype, " (x's dtype)"));

  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  const size_t xr = x.dims.size();
  if (residual) ACLNN_RETURN_IF_ERROR(c.rank(a.h_res, {xr}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.h_out, {xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.h_post, {xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.out, {xr}));

  // Shapes; N and D are those of x (any N, D: empty ones are accepted below).
  const TokenDims t = token_dims(x.dims);
  if (residual) ACLNN_RETURN_IF_ERROR(c.shape(a.h_res, {t.per_token({"N", "N"}, {t.N, t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_out, {t.per_token({"D"}, {t.D})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_post, {t.per_token({"N"}, {t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.out, {t.x_shape()}));

  std::vector<TensorArg> inputs = {a.x, a.h_out, a.h_post};
  if (residual) inputs.push_back(a.h_res);
  *empty = false;
  for (const TensorArg& in : inputs) {
    TensorInfo i;
    ACLNN_RETURN_IF_ERROR(c.info(in, &i));
    *empty = *empty || element_count(i.dims) == 0;
  }
  return ACLNN_SUCCESS;
}

aclnnStatus forward_workspace(const char* op, const char* run_op, const PostArgs& a) {
  const Checks c(op);
  bool empty = false;
  ACLNN_RETURN_IF_ERROR(check_forward(c, a, &empty));
  if (empty) return create_executor(run_op, NothingToRun{}, 0, a.workspace_size, a.executor);

  PostForwardInputs in;
  PostForwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.x));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_res, &in.h_res));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_out, &in.h_out));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_post, &in.h_post));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.out, &out.out));

  core::PostProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(op, ops::post::validate_forward(in, out, Options{}, &problem)));
  const size_t bytes = ops::post::forward_workspace_bytes(problem);
  return create_executor(run_op, PostForward{problem}, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPostGetWorkspaceSize(const aclTensor* x, const aclTensor* hRes, const aclTensor* hOut,
                                         const aclTensor* hPost, aclTensor* out, uint64_t* workspaceSize,
                                         aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPostGetWorkspaceSize";
  return guarded(op, [&] {
    return forward_workspace(op, "aclnnMhcPost",
                             PostArgs{{"x", x}, {"hRes", hRes}, {"hOut", hOut}, {"hPost", hPost}, {"out", out},
                                      workspaceSize, executor});
  });
}

aclnnStatus aclnnMhcPost(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  return guarded("aclnnMhcPost",
                 [&] { return run_executor("aclnnMhcPost", workspace, workspaceSize, executor, stream); });
}

}  // extern "C"
