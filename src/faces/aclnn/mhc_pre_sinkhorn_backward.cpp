// aclnnMhcPreSinkhornBackward: CANN's fused MhcSinkhornBackward +
// MhcPreBackward (SPEC §12) behind CANN's two-phase API. Order of the checks
// (CANN's op_api): workspaceSize and executor -> NULL tensors (all sixteen
// are required) -> empty inputs: success, and the run does nothing -> ranks
// (x's first, then the inputs', then the outputs') -> shapes, with N and D
// from x and I from sumOut -> dtypes -> formats (inputs and outputs). Then
// what CANN does not check (storage, offsets, strides, NULL data, the caches'
// layout, overlap, size limits): mhc::ops::pre_sinkhorn::validate_backward,
// which also makes the problem. CANN's invRms [..,1] is the core's inv_rms
// [..]; sumOut [2I,..,N] and normOut [2I,..,N,N] are its caches with P = N.
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "faces/aclnn/face.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"

namespace mhc::faces::aclnn {
namespace {

struct PreSinkhornBackwardArgs {
  TensorArg grad_h_in, grad_h_post, grad_h_res, x, phi, alpha, bias, h_pre, hc_before_norm, inv_rms, sum_out,
      norm_out;
  double hc_eps;
  TensorArg grad_x, grad_phi, grad_alpha, grad_bias;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// The core's names in this operator's messages (its MhcPreBackward reads
// gradHPost's shape for h_post, its Sinkhorn's grad_z is gradHRes).
// CANN's checks, in CANN's order. *empty: an input is empty (nothing to run).
aclnnStatus check_backward(const Checks& c, const PreSinkhornBackwardArgs& a, bool* empty) {
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  const std::vector<TensorArg> inputs = {a.grad_h_in, a.grad_h_post, a.grad_h_res, a.x,
                                         a.phi,       a.alpha,       a.bias,       a.h_pre,
                                         a.hc_before_norm, a.inv_rms, a.sum_out,  a.norm_out};
  const std::vector<TensorArg> outputs = {a.grad_x, a.grad_phi, a.grad_alpha, a.grad_bias};
  for (const TensorArg& t : inputs) ACLNN_RETURN_IF_ERROR(c.not_null(t));
  for (const TensorArg& t : outputs) ACLNN_RETURN_IF_ERROR(c.not_null(t));

  *empty = false;
  for (const TensorArg& in : {a.grad_h_in, a.grad_h_post, a.grad_h_res, a.x, a.h_pre, a.hc_before_norm, a.inv_rms,
                              a.sum_out, a.norm_out}) {
    TensorInfo i;
    ACLNN_RETURN_IF_ERROR(c.info(in, &i));
    *empty = *empty || element_count(i.dims) == 0;
  }
  if (*empty) {  // nothing runs, but every tensor given must still be a live one
    for (const TensorArg& t : {a.phi, a.alpha, a.bias, a.grad_x, a.grad_phi, a.grad_alpha, a.grad_bias}) {
      TensorInfo i;
      ACLNN_RETURN_IF_ERROR(c.info(t, &i));
    }
    return ACLNN_SUCCESS;
  }

  TensorInfo x, sum;
  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  const size_t xr = x.dims.size();
  for (const TensorArg& t : {a.grad_h_in, a.grad_h_post}) ACLNN_RETURN_IF_ERROR(c.rank(t, {xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_h_res, {xr, xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.phi, {2}));
  for (const TensorArg& t : {a.alpha, a.bias}) ACLNN_RETURN_IF_ERROR(c.rank(t, {1}));
  for (const TensorArg& t : {a.h_pre, a.hc_before_norm, a.inv_rms}) ACLNN_RETURN_IF_ERROR(c.rank(t, {xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.sum_out, {xr}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.norm_out, {xr + 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_x, {xr}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_phi, {2}));
  for (const TensorArg& t : {a.grad_alpha, a.grad_bias}) ACLNN_RETURN_IF_ERROR(c.rank(t, {1}));

  // Shapes; N and D are those of x, F = 2N+N*N, 2I is sumOut's first dim.
  const TokenDims t = token_dims(x.dims);
  const int64_t NN = element_count({t.N, t.N});
  const int64_t F = NN > INT64_MAX - t.two_n ? INT64_MAX : NN + t.two_n;  // saturated, as TokenDims' sizes
  const Shape phi = named_shape({"F", "K"}, {F, t.K}, " (F=2N+N*N, K=N*D)");
  const Shape fusion = named_shape({"F"}, {F}, " (F=2N+N*N)"), alpha = Shape{{3}, {}, "[3]"};
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_in, {t.per_token({"D"}, {t.D})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.phi, {phi}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_post, {t.per_token({"N"}, {t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_res, residual_shapes(t, NN)));
  ACLNN_RETURN_IF_ERROR(c.shape(a.alpha, {alpha}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.bias, {fusion}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_pre, {t.per_token({"N"}, {t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.hc_before_norm, {t.per_token({"F"}, {F})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.inv_rms, {t.per_token({"1"}, {1})}));
  ACLNN_RETURN_IF_ERROR(c.info(a.sum_out, &sum));
  const int64_t steps = sum.dims[0];
  if (steps < 2 || steps % 2 != 0)
    return c.fail(ACLNN_ERR_PARAM_INVALID, "sumOut: expected [2I,..,N] with 2I even and >= 2 (I iterations), got " +
                                               dims_text(sum.dims));
  ACLNN_RETURN_IF_ERROR(c.shape(a.sum_out, {step_shape(t, steps, {"N"}, {t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.norm_out, {step_shape(t, steps, {"N", "N"}, {t.N, t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_x, {t.x_shape()}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_phi, {phi}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_alpha, {alpha}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_bias, {fusion}));

  const char* const like_x = " (x's dtype)";
  ACLNN_RETURN_IF_ERROR(c.x_dtype(a.x));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_in, x.dtype, like_x));
  for (const TensorArg& in : {a.grad_h_post, a.grad_h_res, a.phi, a.alpha, a.bias, a.h_pre, a.hc_before_norm,
                              a.inv_rms, a.sum_out, a.norm_out})
    ACLNN_RETURN_IF_ERROR(c.dtype(in, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_x, x.dtype, like_x));
  for (const TensorArg& out : {a.grad_phi, a.grad_alpha, a.grad_bias}) ACLNN_RETURN_IF_ERROR(c.dtype(out, ACL_FLOAT));

  for (const TensorArg& f : inputs) ACLNN_RETURN_IF_ERROR(c.format(f));
  for (const TensorArg& f : outputs) ACLNN_RETURN_IF_ERROR(c.format(f));
  return ACLNN_SUCCESS;
}

aclnnStatus backward_workspace(const char* op, const char* run_op, const PreSinkhornBackwardArgs& a) {
  const Checks c(op);
  bool empty = false;
  ACLNN_RETURN_IF_ERROR(check_backward(c, a, &empty));
  if (empty) return create_executor(run_op, NothingToRun{}, 0, a.workspace_size, a.executor);

  PreSinkhornBackwardInputs in;
  PreSinkhornBackwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_h_in, &in.grad_h_in));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_h_post, &in.grad_h_post));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_h_res, &in.grad_h_res));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.x));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.phi, &in.phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.alpha, &in.alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.bias, &in.bias));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_pre, &in.h_pre));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.hc_before_norm, &in.h_mix));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.inv_rms, &in.inv_rms));
  in.inv_rms = without_last_dim(in.inv_rms);  // [..,1] -> [..]
  ACLNN_RETURN_IF_ERROR(to_view(op, a.sum_out, &in.sum_out));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.norm_out, &in.norm_out));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_x, &out.grad_x));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_phi, &out.grad_phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_alpha, &out.grad_alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_bias, &out.grad_bias));

  Options options;
  options.hc_eps = a.hc_eps;
  ops::pre_sinkhorn::BackwardProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op,
      ops::pre_sinkhorn::validate_backward(in, out, options, &problem, ops::pre_sinkhorn::Rules{.eps_values = false})));
  const size_t bytes = ops::pre_sinkhorn::backward_workspace_bytes(problem);
  return create_executor(run_op, problem, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPreSinkhornBackwardGetWorkspaceSize(
    const aclTensor* gradHin, const aclTensor* gradHPost, const aclTensor* gradHRes, const aclTensor* x,
    const aclTensor* phi, const aclTensor* alpha, const aclTensor* bias, const aclTensor* hPre,
    const aclTensor* hcBeforeNorm, const aclTensor* invRms, const aclTensor* sumOut, const aclTensor* normOut,
    double hcEps, const aclTensor* gradX, const aclTensor* gradPhi, const aclTensor* gradAlpha,
    const aclTensor* gradBias, uint64_t* workspaceSize, aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreSinkhornBackwardGetWorkspaceSize";
  return guarded(op, [&] {
    return backward_workspace(
        op, "aclnnMhcPreSinkhornBackward",
        PreSinkhornBackwardArgs{{"gradHin", gradHin},   {"gradHPost", gradHPost}, {"gradHRes", gradHRes},
                                {"x", x},               {"phi", phi},             {"alpha", alpha},
                                {"bias", bias},         {"hPre", hPre},           {"hcBeforeNorm", hcBeforeNorm},
                                {"invRms", invRms},     {"sumOut", sumOut},       {"normOut", normOut},
                                hcEps,                  {"gradX", gradX},         {"gradPhi", gradPhi},
                                {"gradAlpha", gradAlpha}, {"gradBias", gradBias}, workspaceSize,
                                executor});
  });
}

aclnnStatus aclnnMhcPreSinkhornBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                        aclrtStream stream) {
  return guarded("aclnnMhcPreSinkhornBackward", [&] {
    return run_executor("aclnnMhcPreSinkhornBackward", workspace, workspaceSize, executor, stream);
  });
}

}  // extern "C"
