// aclnnMhcPre / aclnnMhcPreV2: MhcPre (forward) behind CANN's two-phase API.
// Order of checks (SPEC §7): opImplMode (V2) -> NULL required tensors and
// result pointers (161001) -> what only aclTensors can get wrong (161002) ->
// mhc::ops::pre_forward::validate (its code, its message naming the tensor).
#include <string>

#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_v2.h"
#include "faces/aclnn/face.hpp"
#include "ops/pre_forward/pre_forward.hpp"

namespace mhc::faces::aclnn {

namespace {

aclnnStatus forward_workspace(const char* op, const char* run_op, const aclTensor* x, const aclTensor* phi,
                              const aclTensor* alpha, const aclTensor* bias, const aclTensor* gamma,
                              double norm_eps, double hc_eps, aclTensor* h_in, aclTensor* h_post,
                              aclTensor* h_res, aclTensor* inv_rms, aclTensor* h_mix, aclTensor* h_pre,
                              uint64_t* workspace_size, aclOpExecutor** executor) {
  // hRes is left to pre_forward::validate: required with a 3-entry alpha, absent with a 2-entry one.
  ACLNN_RETURN_IF_ERROR(check_required(op, {{"x", x}, {"phi", phi}, {"alpha", alpha}, {"bias", bias},
                                            {"hIn", h_in}, {"hPost", h_post}},
                                       workspace_size, executor));
  PreForwardInputs in;
  PreForwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, {"x", x}, &in.x));
  ACLNN_RETURN_IF_ERROR(check_x_not_fp32(op, in.x));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"phi", phi}, &in.phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"alpha", alpha}, &in.alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"bias", bias}, &in.bias));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"gamma", gamma}, &in.gamma));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"hIn", h_in}, &out.h_in));
  ACLNN_RETURN_IF_ERROR(to_view(op, {"hPost", h_post}, &out.h_post));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"hRes", h_res}, &out.h_res));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"invRms", inv_rms}, &out.inv_rms));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"hMix", h_mix}, &out.h_mix));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, {"hPre", h_pre}, &out.h_pre));

  Options options;
  options.norm_eps = norm_eps;
  options.hc_eps = hc_eps;
  core::ForwardProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(op, ops::pre_forward::validate(in, out, options, &problem)));
  const size_t bytes = ops::pre_forward::workspace_bytes(problem);
  return create_executor(run_op, problem, bytes, workspace_size, executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPreGetWorkspaceSize(const aclTensor* x, const aclTensor* phi, const aclTensor* alpha,
                                        const aclTensor* bias, const aclTensor* gammaOptional, double normEps,
                                        double hcEps, aclTensor* hIn, aclTensor* hPost, aclTensor* hRes,
                                        aclTensor* invRmsOptional, aclTensor* hMixOptional,
                                        aclTensor* hPreOptional, uint64_t* workspaceSize,
                                        aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreGetWorkspaceSize";
  return guarded(op, [&] {
    return forward_workspace(op, "aclnnMhcPre", x, phi, alpha, bias, gammaOptional, normEps, hcEps, hIn, hPost,
                             hRes, invRmsOptional, hMixOptional, hPreOptional, workspaceSize, executor);
  });
}

aclnnStatus aclnnMhcPre(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  return guarded("aclnnMhcPre",
                 [&] { return run_executor("aclnnMhcPre", workspace, workspaceSize, executor, stream); });
}

aclnnStatus aclnnMhcPreV2GetWorkspaceSize(const aclTensor* x, const aclTensor* phi, const aclTensor* alpha,
                                          const aclTensor* bias, const aclTensor* gammaOptional, double normEps,
                                          double hcEps, int64_t opImplMode, aclTensor* hIn, aclTensor* hPost,
                                          aclTensor* hRes, aclTensor* invRmsOptional, aclTensor* hMixOptional,
                                          aclTensor* hPreOptional, uint64_t* workspaceSize,
                                          aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreV2GetWorkspaceSize";
  return guarded(op, [&] {
    ACLNN_RETURN_IF_ERROR(check_op_impl_mode(op, opImplMode));
    return forward_workspace(op, "aclnnMhcPreV2", x, phi, alpha, bias, gammaOptional, normEps, hcEps, hIn,
                             hPost, hRes, invRmsOptional, hMixOptional, hPreOptional, workspaceSize, executor);
  });
}

aclnnStatus aclnnMhcPreV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  return guarded("aclnnMhcPreV2",
                 [&] { return run_executor("aclnnMhcPreV2", workspace, workspaceSize, executor, stream); });
}

}  // extern "C"
