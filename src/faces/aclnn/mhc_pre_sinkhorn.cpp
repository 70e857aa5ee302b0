// aclnnMhcPreSinkhorn: CANN's fused MhcPre + MhcSinkhorn (SPEC §12) behind
// CANN's two-phase API. Order of the checks (CANN's op_api): workspaceSize and
// executor -> NULL required tensors (x, phi, alpha, bias, hIn, hPost, hRes;
// with needBackward also hPre, hcBeforeNorm, invRms, sumOut, normOut) ->
// dtypes -> shapes (x's rank, hcMult = x's N, numIters, then argument order)
// -> formats -> empty inputs: success, and the run does nothing. Then what CANN
// does not check (storage, offsets, strides, NULL data, the caches' layout,
// overlap, size limits): mhc::ops::pre_sinkhorn::validate_forward, which also
// makes the problem. Without needBackward the caches are not looked at and
// not written. CANN's shapes map to the core's: invRms [..,1] is the core's
// inv_rms [..]; sumOut [2I,..,N] and normOut [2I,..,N,N] are its caches with
// the pitch P = N.
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "faces/aclnn/face.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"

namespace mhc::faces::aclnn {
namespace {

struct PreSinkhornArgs {
  TensorArg x, phi, alpha, bias;
  int64_t hc_mult, num_iters;
  double hc_eps, norm_eps;
  bool need_backward;
  TensorArg h_in, h_post, h_res, h_pre, hc_before_norm, inv_rms, sum_out, norm_out;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// The core's names in this operator's messages (its Sinkhorn's z is hRes).
// CANN's checks, in CANN's order. *empty: an input is empty (nothing to run).
aclnnStatus check_forward(const Checks& c, const PreSinkhornArgs& a, bool* empty) {
  const bool caches = a.need_backward;
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));
  for (const TensorArg& t : {a.x, a.phi, a.alpha, a.bias, a.h_in, a.h_post, a.h_res})
    ACLNN_RETURN_IF_ERROR(c.not_null(t));
  const std::vector<TensorArg> cache_args = {a.h_pre, a.hc_before_norm, a.inv_rms, a.sum_out, a.norm_out};
  if (caches)
    for (const TensorArg& t : cache_args) ACLNN_RETURN_IF_ERROR(c.not_null(t, "required: needBackward is true"));

  TensorInfo x;
  ACLNN_RETURN_IF_ERROR(c.x_dtype(a.x));
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  for (const TensorArg& in : {a.phi, a.alpha, a.bias}) ACLNN_RETURN_IF_ERROR(c.dtype(in, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_in, x.dtype, " (x's dtype)"));
  for (const TensorArg& out : {a.h_post, a.h_res}) ACLNN_RETURN_IF_ERROR(c.dtype(out, ACL_FLOAT));
  if (caches)
    for (const TensorArg& out : cache_args) ACLNN_RETURN_IF_ERROR(c.dtype(out, ACL_FLOAT));

  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  const TokenDims t = token_dims(x.dims);
  if (a.hc_mult != t.N)
    return c.fail(ACLNN_ERR_PARAM_INVALID, "hcMult must equal x's N=" + std::to_string(t.N) + " " +
                                               dims_text(x.dims) + ", got " + std::to_string(a.hc_mult));
  ACLNN_RETURN_IF_ERROR(c.num_iters(a.num_iters));
  // Shapes; N and D are those of x, F = 2N+N*N (alpha has 3 entries, H is N x N).
  const int64_t NN = element_count({t.N, t.N});
  const int64_t F = NN > INT64_MAX - t.two_n ? INT64_MAX : NN + t.two_n;  // saturated, as TokenDims' sizes
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_in, {t.per_token({"D"}, {t.D})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.phi, {named_shape({"F", "K"}, {F, t.K}, " (F=2N+N*N, K=N*D)")}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.alpha, {Shape{{3}, {}, "[3]"}}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.bias, {named_shape({"F"}, {F}, " (F=2N+N*N)")}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_post, {t.per_token({"N"}, {t.N})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_res, residual_shapes(t, NN)));
  if (caches) {
    const int64_t steps = 2 * a.num_iters;  // numIters <= 100
    ACLNN_RETURN_IF_ERROR(c.shape(a.h_pre, {t.per_token({"N"}, {t.N})}));
    ACLNN_RETURN_IF_ERROR(c.shape(a.hc_before_norm, {t.per_token({"F"}, {F})}));
    ACLNN_RETURN_IF_ERROR(c.shape(a.inv_rms, {t.per_token({"1"}, {1})}));
    ACLNN_RETURN_IF_ERROR(c.shape(a.sum_out, {step_shape(t, steps, {"N"}, {t.N})}));
    ACLNN_RETURN_IF_ERROR(c.shape(a.norm_out, {step_shape(t, steps, {"N", "N"}, {t.N, t.N})}));
  }

  std::vector<TensorArg> formatted = {a.x, a.phi, a.alpha, a.bias, a.h_in, a.h_post, a.h_res};
  if (caches) formatted.insert(formatted.end(), cache_args.begin(), cache_args.end());
  for (const TensorArg& f : formatted) ACLNN_RETURN_IF_ERROR(c.format(f));

  *empty = false;
  for (const TensorArg& in : {a.x, a.h_in, a.h_post, a.h_res}) {
    TensorInfo i;
    ACLNN_RETURN_IF_ERROR(c.info(in, &i));
    *empty = *empty || element_count(i.dims) == 0;
  }
  return ACLNN_SUCCESS;
}

aclnnStatus forward_workspace(const char* op, const char* run_op, const PreSinkhornArgs& a) {
  const Checks c(op);
  bool empty = false;
  ACLNN_RETURN_IF_ERROR(check_forward(c, a, &empty));
  if (empty) return create_executor(run_op, NothingToRun{}, 0, a.workspace_size, a.executor);

  PreSinkhornForwardInputs in;
  PreSinkhornForwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.x));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.phi, &in.phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.alpha, &in.alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.bias, &in.bias));
  in.num_iters = a.num_iters;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_in, &out.h_in));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_post, &out.h_post));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_res, &out.h_res));
  // Without needBackward the caches are not looked at: left untouched.
  if (a.need_backward) {
    TensorView inv_rms;
    ACLNN_RETURN_IF_ERROR(to_view(op, a.inv_rms, &inv_rms));
    out.inv_rms = without_last_dim(inv_rms);  // [..,1] -> [..]
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.hc_before_norm, &out.h_mix));
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_pre, &out.h_pre));
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.norm_out, &out.norm_out));
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.sum_out, &out.sum_out));
  }

  Options options;
  options.norm_eps = a.norm_eps;
  options.hc_eps = a.hc_eps;
  ops::pre_sinkhorn::ForwardProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op,
      ops::pre_sinkhorn::validate_forward(in, out, options, &problem, ops::pre_sinkhorn::Rules{.eps_values = false})));
  const size_t bytes = ops::pre_sinkhorn::forward_workspace_bytes(problem);
  return create_executor(run_op, problem, bytes, a.workspace_size, a.executor);
}

}  // namespace
}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclnnStatus aclnnMhcPreSinkhornGetWorkspaceSize(const aclTensor* x, const aclTensor* phi, const aclTensor* alpha,
                                                const aclTensor* bias, int64_t hcMult, int64_t numIters,
                                                double hcEps, double normEps, bool needBackward, aclTensor* hIn,
                                                aclTensor* hPost, aclTensor* hRes, aclTensor* hPre,
                                                aclTensor* hcBeforeNorm, aclTensor* invRms, aclTensor* sumOut,
                                                aclTensor* normOut, uint64_t* workspaceSize,
                                                aclOpExecutor** executor) {
  static const char* op = "aclnnMhcPreSinkhornGetWorkspaceSize";
  return guarded(op, [&] {
    return forward_workspace(
        op, "aclnnMhcPreSinkhorn",
        PreSinkhornArgs{{"x", x},       {"phi", phi},     {"alpha", alpha}, {"bias", bias},
                        hcMult,         numIters,         hcEps,            normEps,
                        needBackward,   {"hIn", hIn},     {"hPost", hPost}, {"hRes", hRes},
                        {"hPre", hPre}, {"hcBeforeNorm", hcBeforeNorm},     {"invRms", invRms},
                        {"sumOut", sumOut}, {"normOut", normOut},           workspaceSize,
                        executor});
  });
}

aclnnStatus aclnnMhcPreSinkhorn(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                aclrtStream stream) {
  return guarded("aclnnMhcPreSinkhorn",
                 [&] { return run_executor("aclnnMhcPreSinkhorn", workspace, workspaceSize, executor, stream); });
}

}  // extern "C"
