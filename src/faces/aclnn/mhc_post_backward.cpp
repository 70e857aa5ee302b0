// aclnnMhcPostBackward: MhcPostBackward (SPEC §11) behind CANN's two-phase
// API. Order of the checks (CANN's op_api): workspaceSize and executor -> NULL
// required tensors (all but hRes) -> empty inputs (161002) -> formats of the
// inputs -> dtypes -> x's rank, then the others' ranks -> shapes, with N and D
// from x. Then what CANN does not check (the outputs' formats, storage,
// offsets, strides, NULL data, overlap, size limits):
// mhc::ops::post::validate_backward, which also makes the problem. gradX is
// in x's dtype, as in CANN (the C++ API may give it in fp32). gradHRes is
// written with or without hRes.
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_post_backward.h"
#include "faces/aclnn/face.hpp"
#include "ops/post/post.hpp"

namespace mhc::faces::aclnn {
namespace {

struct PostBackwardArgs {
  TensorArg grad_output, x, h_res, h_out, h_post;
  TensorArg grad_x, grad_h_res, grad_h_out, grad_h_post;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// CANN's checks, in CANN's order.
aclnnStatus check_backward(const Checks& c, const PostBackwardArgs& a) {
  const bool residual = a.h_res.tensor != nullptr;
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  for (const TensorArg& t : {a.grad_output, a.x}) ACLNN_RETURN_IF_ERROR(c.not_null(t));
  for (const TensorArg& t : {a.h_out, a.h_post, a.grad_x, a.grad_h_res, a.grad_h_out, a.grad_h_post})
    ACLNN_RETURN_IF_ERROR(c.not_null(t));

  // The inputs in argument order; hRes when given.
  std::vector<TensorArg> inputs = {a.grad_output, a.x};
  if (residual) inputs.push_back(a.h_res);
  inputs.insert(inputs.end(), {a.h_out, a.h_post});
  for (const TensorArg& t : inputs) ACLNN_RETURN_IF_ERROR(c.not_empty(t));
  for (const TensorArg& t : inputs) ACLNN_RETURN_IF_ERROR(c.format(t));

  // Dtypes: gradOutput bf16 or fp16, and x, hOut, gradX, gradHOut the same.
  TensorInfo g;
  ACLNN_RETURN_IF_ERROR(c.x_dtype(a.grad_output));
  ACLNN_RETURN_IF_ERROR(c.info(a.grad_output, &g));
  const char* const like = " (gradOutput's dtype)";
  ACLNN_RETURN_IF_ERROR(c.dtype(a.x, g.dtype, like));
  if (residual) ACLNN_RETURN_IF_ERROR(c.dtype(a.h_res, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_out, g.dtype, like));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_post, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_x, g.dtype, like));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_res, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_out, g.dtype, like));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_post, ACL_FLOAT));

  TensorInfo x;
  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  const size_t xr = x.dims.size();
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_output, {xr}));
  if (residual) ACLNN_RETURN_IF_ERROR(c.rank(a.h_res, {xr}));
  for (const TensorArg& t : {a.h_out, a.h_post}) ACLNN_RETURN_IF_ERROR(c.rank(t, {xr - 1}));
  for (const TensorArg& t : {a.grad_x, a.grad_h_res}) ACLNN_RETURN_IF_ERROR(c.rank(t, {xr}));
  for (const TensorArg& t : {a.grad_h_out, a.grad_h_post}) ACLNN_RETURN_IF_ERROR(c.rank(t, {xr - 1}));

  // Shapes; N and D are those of x (any N >= 1, D >= 1: x is not empty).
  const TokenDims t = token_dims(x.dims);
  const Shape streams = t.x_shape(), matrix = t.per_token({"N", "N"}, {t.N, t.N});
  const Shape columns = t.per_token({"D"}, {t.D}), vector = t.per_token({"N"}, {t.N});
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_output, {streams}));
  if (residual) ACLNN_RETURN_IF_ERROR(c.shape(a.h_res, {matrix}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_out, {columns}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_post, {vector}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_x, {streams}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_res, {matrix}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_out, {columns}));
  return c.shape(a.grad_h_post, {vector});
}

aclnnStatus backward_workspace(const char* op, const char* run_op, const PostBackwardArgs& a) {
  const Checks c(op);
  ACLNN_RETURN_IF_ERROR(check_backward(c, a));

  PostBackwardInputs in;
  PostBackwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_output, &in.grad_out));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.x));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_res, &in.h_res));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_out, &in.h_out));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_post, &in.h_post));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_x, &out.grad_x));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.grad_h_res, &out.grad_h_res));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_h_out, &out.grad_h_out));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_h_post, &out.grad_h_post));

  core::PostProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op, ops::post::validate_backward(in, out, Options{}, &problem, ops::post::Rules{.fp32_grad_x = false})));
  const size_t bytes = ops::post::backward_workspace_bytes(problem);
  return create_executor(run_op, PostBackward{problem}, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPostBackwardGetWorkspaceSize(const aclTensor* gradOutput, const aclTensor* x,
                                                 const aclTensor* hRes, const aclTensor* hOut,
                                                 const aclTensor* hPost, aclTensor* gradX, aclTensor* gradHRes,
                                                 aclTensor* gradHOut, aclTensor* gradHPost, uint64_t* workspaceSize,
                                                 aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPostBackwardGetWorkspaceSize";
  return guarded(op, [&] {
    return backward_workspace(
        op, "aclnnMhcPostBackward",
        PostBackwardArgs{{"gradOutput", gradOutput}, {"x", x},         {"hRes", hRes},
                         {"hOut", hOut},             {"hPost", hPost}, {"gradX", gradX},
                         {"gradHRes", gradHRes},     {"gradHOut", gradHOut}, {"gradHPost", gradHPost},
                         workspaceSize,              executor});
  });
}

aclnnStatus aclnnMhcPostBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                 aclrtStream stream) {
  return guarded("aclnnMhcPostBackward", [&] {
    return run_executor("aclnnMhcPostBackward", workspace, workspaceSize, executor, stream);
  });
}

}  // extern "C"
