// aclnnMhcPreBackward / aclnnMhcPreBackwardV2: MhcPreBackward behind CANN's
// two-phase API. Order of the checks (SPEC §7, CANN's op_api): workspaceSize
// and executor -> NULL required tensors -> empty inputs -> ranks -> shapes ->
// dtypes -> formats of the inputs -> opImplMode. Then what CANN does not check
// (output formats, storage, strides, NULL data, overlap, size limits):
// mhc::ops::pre::backward::validate, which also makes the problem.
// gradGamma is required exactly when gammaOptional is given, and ignored (not
// written) without it: CANN's signature has no optional gradGamma. With a
// two-entry alpha (phi has F = 2N rows) gradHRes may be NULL and is not read.
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnnop/aclnn_mhc_pre_backward_v2.h"
#include "faces/aclnn/face.hpp"
#include "ops/pre/backward.hpp"

namespace mhc::faces::aclnn {
namespace {

struct BackwardArgs {
  TensorArg x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post, gamma, grad_x_post;
  float hc_eps;
  int64_t op_impl_mode;  // 0 for aclnnMhcPreBackward
  TensorArg grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// Whether alpha has 3 entries, as far as its descriptor says before it is checked
// (any other alpha is rejected later with 161002, whatever gradHRes is).
bool three_entry_alpha(const TensorArg& alpha) {
  TensorInfo t;
  return alpha.tensor != nullptr && tensor_info(alpha.tensor, &t) && t.dims.size() == 1 && t.dims[0] == 3;
}

// CANN's checks, in CANN's order. *with_residual: alpha (and phi) have the residual branch.
aclnnStatus check_backward(const Checks& c, const BackwardArgs& a, bool* with_residual) {
  const bool gamma = a.gamma.tensor != nullptr;
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  *with_residual = three_entry_alpha(a.alpha);
  for (const TensorArg& t : {a.x, a.phi, a.alpha, a.grad_h_in, a.grad_h_post}) ACLNN_RETURN_IF_ERROR(c.not_null(t));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.not_null(a.grad_h_res, "required: alpha has 3 entries"));
  for (const TensorArg& t : {a.inv_rms, a.h_mix, a.h_pre, a.h_post, a.grad_x, a.grad_phi, a.grad_alpha, a.grad_bias})
    ACLNN_RETURN_IF_ERROR(c.not_null(t));
  if (gamma) ACLNN_RETURN_IF_ERROR(c.not_null(a.grad_gamma, "required: gammaOptional is given"));

  // The inputs in argument order; gradHRes only with the residual branch.
  std::vector<TensorArg> inputs = {a.x, a.phi, a.alpha, a.grad_h_in, a.grad_h_post};
  if (*with_residual) inputs.push_back(a.grad_h_res);
  inputs.insert(inputs.end(), {a.inv_rms, a.h_mix, a.h_pre, a.h_post});
  if (gamma) inputs.push_back(a.gamma);
  if (a.grad_x_post.tensor != nullptr) inputs.push_back(a.grad_x_post);
  for (const TensorArg& t : inputs) ACLNN_RETURN_IF_ERROR(c.not_empty(t));

  TensorInfo x, phi;
  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  const size_t xr = x.dims.size();
  ACLNN_RETURN_IF_ERROR(c.rank(a.phi, {2}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.alpha, {1}));
  if (gamma) ACLNN_RETURN_IF_ERROR(c.rank(a.gamma, {2}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_h_in, {xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_h_post, {xr - 1}));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.rank(a.grad_h_res, {xr, xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.inv_rms, {xr - 2}));
  for (const TensorArg& t : {a.h_mix, a.h_pre, a.h_post}) ACLNN_RETURN_IF_ERROR(c.rank(t, {xr - 1}));
  if (a.grad_x_post.tensor != nullptr) ACLNN_RETURN_IF_ERROR(c.rank(a.grad_x_post, {xr}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_x, {xr}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_phi, {2}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_alpha, {1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.grad_bias, {1}));
  if (gamma) ACLNN_RETURN_IF_ERROR(c.rank(a.grad_gamma, {2}));

  // Shapes; N and D are those of x, F is phi's (any of its three forms), alpha agrees with F.
  const TokenDims t = token_dims(x.dims);
  ACLNN_RETURN_IF_ERROR(c.shape(a.phi, phi_shapes(t, true, true)));
  ACLNN_RETURN_IF_ERROR(c.info(a.phi, &phi));
  const int64_t F = phi.dims[0], R = F - t.two_n;  // F >= 2N: it is one of phi_shapes
  const int64_t entries = R == 0 ? 2 : 3;
  const Shape alpha_shape = {{entries}, {}, R == 0 ? "[2] (phi has F=2N rows)" : "[3] (phi has F=2N+R rows)"};
  ACLNN_RETURN_IF_ERROR(c.shape(a.alpha, {alpha_shape}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_in, {t.per_token({"D"}, {t.D})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_post, {t.per_token({"N"}, {t.N})}));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.shape(a.grad_h_res, residual_shapes(t, R)));
  ACLNN_RETURN_IF_ERROR(c.shape(a.inv_rms, {t.per_token({}, {})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_mix, {t.per_token({"F"}, {F})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_pre, {t.per_token({"N"}, {t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_post, {t.per_token({"N"}, {t.N})}));
  const Shape nd = named_shape({"N", "D"}, {t.N, t.D});
  if (gamma) ACLNN_RETURN_IF_ERROR(c.shape(a.gamma, {nd}));
  if (a.grad_x_post.tensor != nullptr) ACLNN_RETURN_IF_ERROR(c.shape(a.grad_x_post, {t.x_shape()}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_x, {t.x_shape()}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_phi, {named_shape({"F", "K"}, {F, t.K}, " (phi's shape)")}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_alpha, {alpha_shape}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.grad_bias, {named_shape({"F"}, {F}, " (phi's rows)")}));
  if (gamma) ACLNN_RETURN_IF_ERROR(c.shape(a.grad_gamma, {nd}));

  const char* const like_x = " (x's dtype)";
  ACLNN_RETURN_IF_ERROR(c.x_dtype(a.x));
  for (const TensorArg& in : {a.phi, a.alpha}) ACLNN_RETURN_IF_ERROR(c.dtype(in, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_in, x.dtype, like_x));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_post, ACL_FLOAT));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_h_res, ACL_FLOAT));
  for (const TensorArg& in : {a.inv_rms, a.h_mix, a.h_pre, a.h_post}) ACLNN_RETURN_IF_ERROR(c.dtype(in, ACL_FLOAT));
  if (gamma) ACLNN_RETURN_IF_ERROR(c.dtype(a.gamma, ACL_FLOAT));
  if (a.grad_x_post.tensor != nullptr) ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_x_post, x.dtype, like_x));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_x, x.dtype, like_x));
  for (const TensorArg& out : {a.grad_phi, a.grad_alpha, a.grad_bias}) ACLNN_RETURN_IF_ERROR(c.dtype(out, ACL_FLOAT));
  if (gamma) ACLNN_RETURN_IF_ERROR(c.dtype(a.grad_gamma, ACL_FLOAT));

  for (const TensorArg& in : inputs) ACLNN_RETURN_IF_ERROR(c.format(in));
  return c.op_impl_mode(a.op_impl_mode);
}

aclnnStatus backward_workspace(const char* op, const char* run_op, const BackwardArgs& a) {
  const Checks c(op);
  bool with_residual = true;
  ACLNN_RETURN_IF_ERROR(check_backward(c, a, &with_residual));

  PreBackwardInputs in;
  PreBackwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.x));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.phi, &in.phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.alpha, &in.alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_h_in, &in.grad_h_in));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.grad_h_post, &in.grad_h_post));
  // With a two-entry alpha a gradHRes given is not looked at, so never read (SPEC §6).
  if (with_residual) ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.grad_h_res, &in.grad_h_res));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.inv_rms, &in.inv_rms));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_mix, &in.h_mix));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_pre, &in.h_pre));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_post, &in.h_post));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.gamma, &in.gamma));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.grad_x_post, &in.grad_x_post));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_x, &out.grad_x));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_phi, &out.grad_phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_alpha, &out.grad_alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.grad_bias, &out.grad_bias));
  if (in.gamma) ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.grad_gamma, &out.grad_gamma));

  Options options;
  options.hc_eps = a.hc_eps;  // float in CANN's signature, widened exactly
  options.matmul_precision = a.op_impl_mode == 1 ? MatmulPrecision::hf32 : MatmulPrecision::fp32;
  core::BackwardProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op, ops::pre::backward::validate(in, out, options, &problem, ops::pre::backward::Rules{.eps_values = false})));
  const size_t bytes = ops::pre::backward::workspace_bytes(problem);
  return create_executor(run_op, problem, bytes, a.workspace_size, a.executor);
}

BackwardArgs backward_args(const aclTensor* x, const aclTensor* phi, const aclTensor* alpha, const aclTensor* gh_in,
                           const aclTensor* gh_post, const aclTensor* gh_res, const aclTensor* inv_rms,
                           const aclTensor* h_mix, const aclTensor* h_pre, const aclTensor* h_post,
                           const aclTensor* gamma, const aclTensor* gx_post, float hc_eps, int64_t mode,
                           const aclTensor* gx, const aclTensor* g_phi, const aclTensor* g_alpha,
                           const aclTensor* g_bias, const aclTensor* g_gamma, uint64_t* workspace_size,
                           aclOpExecutor** executor) {
  return {{"x", x},           {"phi", phi},         {"alpha", alpha},         {"gradHIn", gh_in},
          {"gradHPost", gh_post}, {"gradHRes", gh_res}, {"invRms", inv_rms},  {"hMix", h_mix},
          {"hPre", h_pre},    {"hPost", h_post},    {"gamma", gamma},         {"gradXPost", gx_post},
          hc_eps,             mode,                 {"gradX", gx},            {"gradPhi", g_phi},
          {"gradAlpha", g_alpha}, {"gradBias", g_bias}, {"gradGamma", g_gamma}, workspace_size,
          executor};
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPreBackwardGetWorkspaceSize(
    const aclTensor* x, const aclTensor* phi, const aclTensor* alpha, const aclTensor* gradHIn,
    const aclTensor* gradHPost, const aclTensor* gradHRes, const aclTensor* invRms, const aclTensor* hMix,
    const aclTensor* hPre, const aclTensor* hPost, const aclTensor* gammaOptional,
    const aclTensor* gradXPostOptional, float hcEps, const aclTensor* gradX, const aclTensor* gradPhi,
    const aclTensor* gradAlpha, const aclTensor* gradBias, const aclTensor* gradGamma, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreBackwardGetWorkspaceSize";
  return guarded(op, [&] {
    return backward_workspace(op, "aclnnMhcPreBackward",
                              backward_args(x, phi, alpha, gradHIn, gradHPost, gradHRes, invRms, hMix, hPre, hPost,
                                            gammaOptional, gradXPostOptional, hcEps, 0, gradX, gradPhi, gradAlpha,
                                            gradBias, gradGamma, workspaceSize, executor));
  });
}

aclnnStatus aclnnMhcPreBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                aclrtStream stream) {
  return guarded("aclnnMhcPreBackward", [&] {
    return run_executor("aclnnMhcPreBackward", workspace, workspaceSize, executor, stream);
  });
}

aclnnStatus aclnnMhcPreBackwardV2GetWorkspaceSize(
    const aclTensor* x, const aclTensor* phi, const aclTensor* alpha, const aclTensor* gradHIn,
    const aclTensor* gradHPost, const aclTensor* gradHRes, const aclTensor* invRms, const aclTensor* hMix,
    const aclTensor* hPre, const aclTensor* hPost, const aclTensor* gammaOptional,
    const aclTensor* gradXPostOptional, float hcEps, int64_t opImplMode, const aclTensor* gradX,
    const aclTensor* gradPhi, const aclTensor* gradAlpha, const aclTensor* gradBias, const aclTensor* gradGamma,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreBackwardV2GetWorkspaceSize";
  return guarded(op, [&] {
    return backward_workspace(op, "aclnnMhcPreBackwardV2",
                              backward_args(x, phi, alpha, gradHIn, gradHPost, gradHRes, invRms, hMix, hPre, hPost,
                                            gammaOptional, gradXPostOptional, hcEps, opImplMode, gradX, gradPhi,
                                            gradAlpha, gradBias, gradGamma, workspaceSize, executor));
  });
}

aclnnStatus aclnnMhcPreBackwardV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                  aclrtStream stream) {
  return guarded("aclnnMhcPreBackwardV2", [&] {
    return run_executor("aclnnMhcPreBackwardV2", workspace, workspaceSize, executor, stream);
  });
}

}  // extern "C"
