// aclnnMhcPreBackward / aclnnMhcPreBackwardV2: MhcPreBackward behind CANN's
// two-phase API. Order of checks as in mhc_pre.cpp; gradGamma is required
// exactly when gammaOptional is given (161001), and ignored (not written)
// without it, since CANN's signature has no optional gradGamma.
#include <string>

#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnnop/aclnn_mhc_pre_backward_v2.h"
#include "faces/aclnn/face.hpp"
#include "ops/pre_backward/pre_backward.hpp"

namespace mhc::faces::aclnn {
namespace {

struct BackwardArgs {
  const aclTensor *x, *phi, *alpha, *grad_h_in, *grad_h_post, *grad_h_res, *inv_rms, *h_mix, *h_pre, *h_post,
      *gamma, *grad_x_post;
  float hc_eps;
  aclTensor *grad_x, *grad_phi, *grad_alpha, *grad_bias, *grad_gamma;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

aclnnStatus backward_workspace(const char* op, const char* run_op, const BackwardArgs& a) {
  // gradHRes is left to pre_backward::validate: required with a 3-entry alpha, absent with a 2-entry one.
  ACLNN_RETURN_IF_ERROR(check_required(
      op,
      {{"x", a.x}, {"phi", a.phi}, {"alpha", a.alpha}, {"gradHIn", a.grad_h_in}, {"gradHPost", a.grad_h_post},
       {"invRms", a.inv_rms}, {"hMix", a.h_mix}, {"hPre", a.h_pre}, {"hPost", a.h_post}, {"gradX", a.grad_x},
       {"gradPhi", a.grad_phi}, {"gradAlpha", a.grad_alpha}, {"gradBias", a.grad_bias}},
      a.workspace_size, a.executor));
  if (a.gamma != nullptr && a.grad_gamma == nullptr)
    return fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": gradGamma is NULL (required when gamma is given)");

  PreBackwardInputs in;
  PreBackwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, {"x", a.x}, &in.x));
  ACLNN_RETURN_IF_ERROR(check_x_not_fp32(op, in.x));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"phi", a.phi}, &in.phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"alpha", a.alpha}, &in.alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"gradHIn", a.grad_h_in}, &in.grad_h_in));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"gradHPost", a.grad_h_post}, &in.grad_h_post));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"gradHRes", a.grad_h_res}, &in.grad_h_res));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"invRms", a.inv_rms}, &in.inv_rms));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"hMix", a.h_mix}, &in.h_mix));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"hPre", a.h_pre}, &in.h_pre));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"hPost", a.h_post}, &in.h_post));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"gamma", a.gamma}, &in.gamma));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"gradXPost", a.grad_x_post}, &in.grad_x_post));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"gradX", a.grad_x}, &out.grad_x));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"gradPhi", a.grad_phi}, &out.grad_phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"gradAlpha", a.grad_alpha}, &out.grad_alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"gradBias", a.grad_bias}, &out.grad_bias));
  if (in.gamma) ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"gradGamma", a.grad_gamma}, &out.grad_gamma));

  Options options;
  options.hc_eps = a.hc_eps;  // float in CANN's signature, widened exactly
  core::BackwardProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(op, ops::pre_backward::validate(in, out, options, &problem)));
  const size_t bytes = ops::pre_backward::workspace_bytes(problem);
  return create_executor(run_op, problem, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPreBackwardGetWorkspaceSize(
    const aclTensor* x, const aclTensor* phi, const aclTensor* alpha, const aclTensor* gradHIn,
    const aclTensor* gradHPost, const aclTensor* gradHRes, const aclTensor* invRms, const aclTensor* hMix,
    const aclTensor* hPre, const aclTensor* hPost, const aclTensor* gammaOptional,
    const aclTensor* gradXPostOptional, float hcEps, aclTensor* gradX, aclTensor* gradPhi, aclTensor* gradAlpha,
    aclTensor* gradBias, aclTensor* gradGamma, uint64_t* workspaceSize, aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreBackwardGetWorkspaceSize";
  return guarded(op, [&] {
    return backward_workspace(op, "aclnnMhcPreBackward",
                              {x, phi, alpha, gradHIn, gradHPost, gradHRes, invRms, hMix, hPre, hPost,
                               gammaOptional, gradXPostOptional, hcEps, gradX, gradPhi, gradAlpha, gradBias,
                               gradGamma, workspaceSize, executor});
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
    const aclTensor* gradXPostOptional, float hcEps, int64_t opImplMode, aclTensor* gradX, aclTensor* gradPhi,
    aclTensor* gradAlpha, aclTensor* gradBias, aclTensor* gradGamma, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreBackwardV2GetWorkspaceSize";
  return guarded(op, [&] {
    ACLNN_RETURN_IF_ERROR(check_op_impl_mode(op, opImplMode));
    return backward_workspace(op, "aclnnMhcPreBackwardV2",
                              {x, phi, alpha, gradHIn, gradHPost, gradHRes, invRms, hMix, hPre, hPost,
                               gammaOptional, gradXPostOptional, hcEps, gradX, gradPhi, gradAlpha, gradBias,
                               gradGamma, workspaceSize, executor});
  });
}

aclnnStatus aclnnMhcPreBackwardV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                  aclrtStream stream) {
  return guarded("aclnnMhcPreBackwardV2", [&] {
    return run_executor("aclnnMhcPreBackwardV2", workspace, workspaceSize, executor, stream);
  });
}

}  // extern "C"
