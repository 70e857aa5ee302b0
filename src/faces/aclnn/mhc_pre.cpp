// aclnnMhcPre / aclnnMhcPreV2: MhcPre (forward) behind CANN's two-phase API.
// Order of the checks (SPEC §7, CANN's op_api): workspaceSize and executor ->
// NULL required tensors -> empty inputs -> input ranks -> alpha's length ->
// hRes NULL with a 3-entry alpha (161001) -> output ranks and the cache group
// -> shapes -> dtypes -> formats -> opImplMode. Then what CANN does not check
// (storage, offsets, strides, NULL data, overlap, size limits):
// mhc::ops::pre::forward::validate, which also makes the problem.
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_v2.h"
#include "faces/aclnn/face.hpp"
#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/pre/forward.hpp"

namespace mhc::faces::aclnn {
namespace {

struct ForwardArgs {
  TensorArg x, phi, alpha, bias, gamma;
  double norm_eps, hc_eps;
  int64_t op_impl_mode;  // 0 for aclnnMhcPre
  TensorArg h_in, h_post, h_res, inv_rms, h_mix, h_pre;
  uint64_t* workspace_size;
  aclOpExecutor** executor;
};

// CANN's checks, in CANN's order, after its first (workspaceSize and executor:
// forward_workspace). *with_residual: alpha has 3 entries; *caches: invRms, hMix
// and hPre are given.
aclnnStatus check_forward(const Checks& c, const ForwardArgs& a, bool* with_residual, bool* caches) {
  for (const TensorArg& t : {a.x, a.phi, a.alpha, a.bias, a.h_in, a.h_post}) ACLNN_RETURN_IF_ERROR(c.not_null(t));

  std::vector<TensorArg> inputs = {a.x, a.phi, a.alpha, a.bias};
  if (a.gamma.tensor != nullptr) inputs.push_back(a.gamma);
  for (const TensorArg& t : inputs) ACLNN_RETURN_IF_ERROR(c.not_empty(t));

  TensorInfo x, alpha, phi;
  ACLNN_RETURN_IF_ERROR(c.rank(a.x, {3, 4}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.phi, {2}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.alpha, {1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.bias, {1}));
  if (a.gamma.tensor != nullptr) ACLNN_RETURN_IF_ERROR(c.rank(a.gamma, {2}));
  ACLNN_RETURN_IF_ERROR(c.info(a.x, &x));
  ACLNN_RETURN_IF_ERROR(c.info(a.alpha, &alpha));
  const size_t xr = x.dims.size();

  const int64_t entries = alpha.dims[0];
  if (entries != 2 && entries != 3)
    return c.fail(ACLNN_ERR_PARAM_INVALID, "alpha: expected [2] or [3], got [" + std::to_string(entries) + "]");
  *with_residual = entries == 3;
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.not_null(a.h_res, "required: alpha has 3 entries"));

  ACLNN_RETURN_IF_ERROR(c.rank(a.h_in, {xr - 1}));
  ACLNN_RETURN_IF_ERROR(c.rank(a.h_post, {xr - 1}));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.rank(a.h_res, {xr, xr - 1}));
  const int given = int(a.inv_rms.tensor != nullptr) + int(a.h_mix.tensor != nullptr) + int(a.h_pre.tensor != nullptr);
  if (given != 0 && given != 3) {
    auto state = [](const TensorArg& t) { return std::string(t.name) + (t.tensor ? " given" : " NULL"); };
    return c.fail(ACLNN_ERR_PARAM_INVALID, "the caches invRms, hMix, hPre come all three or none; got " +
                                               state(a.inv_rms) + ", " + state(a.h_mix) + ", " + state(a.h_pre));
  }
  *caches = given == 3;
  if (*caches) {
    ACLNN_RETURN_IF_ERROR(c.rank(a.inv_rms, {xr - 2}));
    ACLNN_RETURN_IF_ERROR(c.rank(a.h_mix, {xr - 1}));
    ACLNN_RETURN_IF_ERROR(c.rank(a.h_pre, {xr - 1}));
  }

  // Shapes; N and D are those of x (any N >= 1, D >= 1: x is not empty).
  const TokenDims t = token_dims(x.dims);
  ACLNN_RETURN_IF_ERROR(c.shape(a.phi, phi_shapes(t, *with_residual, !*with_residual)));
  ACLNN_RETURN_IF_ERROR(c.info(a.phi, &phi));
  const int64_t F = phi.dims[0], R = F - t.two_n;  // F >= 2N: it is one of phi_shapes
  ACLNN_RETURN_IF_ERROR(c.shape(a.bias, {named_shape({"F"}, {F}, " (phi's rows)")}));
  if (a.gamma.tensor != nullptr) ACLNN_RETURN_IF_ERROR(c.shape(a.gamma, {named_shape({"N", "D"}, {t.N, t.D})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_in, {t.per_token({"D"}, {t.D})}));
  ACLNN_RETURN_IF_ERROR(c.shape(a.h_post, {t.per_token({"N"}, {t.N})}));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.shape(a.h_res, residual_shapes(t, R)));
  if (*caches) {
    ACLNN_RETURN_IF_ERROR(c.shape(a.inv_rms, {t.per_token({}, {})}));
    ACLNN_RETURN_IF_ERROR(c.shape(a.h_mix, {t.per_token({"F"}, {F})}));
    ACLNN_RETURN_IF_ERROR(c.shape(a.h_pre, {t.per_token({"N"}, {t.N})}));
  }

  ACLNN_RETURN_IF_ERROR(c.x_dtype(a.x));
  for (const TensorArg& in : {a.phi, a.alpha, a.bias}) ACLNN_RETURN_IF_ERROR(c.dtype(in, ACL_FLOAT));
  if (a.gamma.tensor != nullptr) ACLNN_RETURN_IF_ERROR(c.dtype(a.gamma, ACL_FLOAT));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_in, x.dtype, " (x's dtype)"));
  ACLNN_RETURN_IF_ERROR(c.dtype(a.h_post, ACL_FLOAT));
  if (*with_residual) ACLNN_RETURN_IF_ERROR(c.dtype(a.h_res, ACL_FLOAT));
  if (*caches)
    for (const TensorArg& out : {a.inv_rms, a.h_mix, a.h_pre}) ACLNN_RETURN_IF_ERROR(c.dtype(out, ACL_FLOAT));

  std::vector<TensorArg> formatted = inputs;
  formatted.insert(formatted.end(), {a.h_in, a.h_post});
  if (*with_residual) formatted.push_back(a.h_res);
  if (*caches) formatted.insert(formatted.end(), {a.inv_rms, a.h_mix, a.h_pre});
  for (const TensorArg& f : formatted) ACLNN_RETURN_IF_ERROR(c.format(f));

  return c.op_impl_mode(a.op_impl_mode);
}

// The last first phase that passed the checks on this thread, and the problem
// they gave. aclTensors do not change after creation and handle ids are never
// reused, so the same live tensors with the same scalars, kernel family and
// thread count give the same problem: an inference loop that asks again each step
// skips CANN's checks and the conversion (about 5 us of a T=1 step on an EPYC
// core, mhc-bench decode's aclnn column) and takes the primitive from the
// thread's primitive cache, as every face does.
struct CheckedArguments {
  bool valid = false;
  const char* op = nullptr;
  std::array<const aclTensor*, 11> tensors{};
  double norm_eps = 0, hc_eps = 0;
  int64_t op_impl_mode = 0;
  Isa isa = Isa::reference;
  int threads = 0;
  core::ForwardProblem problem;
};
thread_local CheckedArguments last_checked;

std::array<const aclTensor*, 11> tensors_of(const ForwardArgs& a) {
  return {a.x.tensor,     a.phi.tensor,    a.alpha.tensor,   a.bias.tensor, a.gamma.tensor, a.h_in.tensor,
          a.h_post.tensor, a.h_res.tensor, a.inv_rms.tensor, a.h_mix.tensor, a.h_pre.tensor};
}

// Whether `a` asks what `m` checked; the scalars compared by their bits (a NaN
// is the same NaN).
bool same_arguments(const CheckedArguments& m, const char* op, const ForwardArgs& a, Isa isa, int threads) {
  if (!m.valid || m.op != op || m.tensors != tensors_of(a) || m.op_impl_mode != a.op_impl_mode ||
      m.isa != isa || m.threads != threads || std::memcmp(&m.norm_eps, &a.norm_eps, sizeof(double)) != 0 ||
      std::memcmp(&m.hc_eps, &a.hc_eps, sizeof(double)) != 0)
    return false;
  return tensors_are_live(m.tensors);
}

aclnnStatus executor_for(const char* run_op, const core::ForwardProblem& problem, int threads, const ForwardArgs& a) {
  auto primitive = ops::pre::forward::cached_primitive(problem, threads);
  const size_t bytes = primitive->workspace_bytes;
  return create_executor(run_op, PreForward{std::move(primitive)}, bytes, a.workspace_size, a.executor);
}

aclnnStatus forward_workspace(const char* op, const char* run_op, const ForwardArgs& a) {
  const Checks c(op);
  ACLNN_RETURN_IF_ERROR(c.result_pointers(a.workspace_size, a.executor));  // CANN's first check
  Isa isa = Isa::reference;
  const bool known_isa = ops::resolve_isa(Isa::automatic, &isa).ok();
  const int threads = ops::resolve_threads(0);
  CheckedArguments& checked = last_checked;
  if (known_isa && same_arguments(checked, op, a, isa, threads)) return executor_for(run_op, checked.problem, threads, a);
  checked.valid = false;

  bool with_residual = false, caches = false;
  ACLNN_RETURN_IF_ERROR(check_forward(c, a, &with_residual, &caches));

  PreForwardInputs in;
  PreForwardOutputs out;
  ACLNN_RETURN_IF_ERROR(to_view(op, a.x, &in.x));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.phi, &in.phi));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.alpha, &in.alpha));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.bias, &in.bias));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.gamma, &in.gamma));
  ACLNN_RETURN_IF_ERROR(to_view(op, a.h_in, &out.h_in));
  ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_post, &out.h_post));
  // With a two-entry alpha an hRes given is not looked at: left untouched (SPEC §6).
  if (with_residual) ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_res, &out.h_res));
  if (caches) {
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.inv_rms, &out.inv_rms));
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_mix, &out.h_mix));
    ACLNN_RETURN_IF_ERROR(to_optional_view(op, a.h_pre, &out.h_pre));
  }

  Options options;
  options.norm_eps = a.norm_eps;
  options.hc_eps = a.hc_eps;
  options.matmul_precision = a.op_impl_mode == 1 ? MatmulPrecision::hf32 : MatmulPrecision::fp32;
  core::ForwardProblem problem;
  ACLNN_RETURN_IF_ERROR(from_status(
      op, ops::pre::forward::validate(in, out, options, &problem, ops::pre::forward::Rules{.eps_values = false})));
  if (known_isa && problem.isa == isa) {
    checked = {.valid = true, .op = op, .tensors = tensors_of(a), .norm_eps = a.norm_eps, .hc_eps = a.hc_eps,
               .op_impl_mode = a.op_impl_mode, .isa = isa, .threads = threads, .problem = problem};
  }
  return executor_for(run_op, problem, threads, a);
}

ForwardArgs forward_args(const aclTensor* x, const aclTensor* phi, const aclTensor* alpha, const aclTensor* bias,
                         const aclTensor* gamma, double norm_eps, double hc_eps, int64_t mode, aclTensor* h_in,
                         aclTensor* h_post, aclTensor* h_res, aclTensor* inv_rms, aclTensor* h_mix,
                         aclTensor* h_pre, uint64_t* workspace_size, aclOpExecutor** executor) {
  return {{"x", x},         {"phi", phi},       {"alpha", alpha},     {"bias", bias},   {"gamma", gamma},
          norm_eps,         hc_eps,             mode,                 {"hIn", h_in},    {"hPost", h_post},
          {"hRes", h_res},  {"invRms", inv_rms}, {"hMix", h_mix},     {"hPre", h_pre},  workspace_size,
          executor};
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
    return forward_workspace(op, "aclnnMhcPre",
                             forward_args(x, phi, alpha, bias, gammaOptional, normEps, hcEps, 0, hIn, hPost, hRes,
                                          invRmsOptional, hMixOptional, hPreOptional, workspaceSize, executor));
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
    return forward_workspace(op, "aclnnMhcPreV2",
                             forward_args(x, phi, alpha, bias, gammaOptional, normEps, hcEps, opImplMode, hIn,
                                          hPost, hRes, invRmsOptional, hMixOptional, hPreOptional, workspaceSize,
                                          executor));
  });
}

aclnnStatus aclnnMhcPreV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  return guarded("aclnnMhcPreV2",
                 [&] { return run_executor("aclnnMhcPreV2", workspace, workspaceSize, executor, stream); });
}

}  // extern "C"
