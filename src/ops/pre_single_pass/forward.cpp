// MhcPreSinglePass (SPEC §14): MhcPre's validation and driver with h_in collapsed
// by the carried pre-mix (or stream 0 selected), z_res into the workspace, then
// the Sinkhorn from there into h_res.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/composition.hpp"
#include "ops/pre/forward.hpp"
#include "ops/pre/operands.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc::ops::pre_single_pass {
namespace {

constexpr const char* kWhose = "the single pass's";
constexpr const char* kWhy = "the single pass has the residual branch";

struct ForwardLayout {
  size_t z_bytes, rest;
};
ForwardLayout forward_layout(const ForwardProblem& problem, int num_threads) {
  ForwardProblem sized = problem;
  sized.pre.h_res = contiguous_like(problem.pre.h_res, kSizingAddress);
  sized.sinkhorn.z = contiguous_like(problem.sinkhorn.z, kSizingAddress);
  const size_t z_bytes = aligned64(size_t(problem.pre.dims.T * problem.pre.dims.R) * sizeof(float));
  return {z_bytes, std::max(pre::forward::workspace_bytes(sized.pre, num_threads),
                            sinkhorn::forward_workspace_bytes(sized.sinkhorn, num_threads))};
}

}  // namespace

Status validate_forward(const PreSinglePassForwardInputs& in, const PreSinglePassForwardOutputs& out,
                        const Options& options, ForwardProblem* p) {
  ForwardProblem problem;
  MHC_RETURN_IF_ERROR(check_residual_branch(in.x, in.phi, in.alpha, kWhose, kWhy));
  const PreForwardInputs pre_in{in.x, in.phi, in.alpha, in.bias, in.gamma};
  const PreForwardOutputs pre_out{out.h_in, out.h_post, out.h_res, out.inv_rms, out.h_mix, out.h_pre};
  MHC_RETURN_IF_ERROR(pre::forward::validate(pre_in, pre_out, options, &problem.pre));
  const core::Dims& d = problem.pre.dims;
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  if (in.pre_mix) MHC_RETURN_IF_ERROR(check_fp32("pre_mix", *in.pre_mix, {s.shape({"N"}, {d.N})}));
  const TensorView h_res = as_matrices(out.h_res, d.N, s.leading());
  const SinkhornForwardInputs sinkhorn_in{h_res, in.sinkhorn_eps, in.num_iters};
  const SinkhornForwardOutputs sinkhorn_out{h_res, std::nullopt, std::nullopt};
  MHC_RETURN_IF_ERROR(check_eps("sinkhorn_eps", in.sinkhorn_eps));  // named as the caller knows it
  MHC_RETURN_IF_ERROR(sinkhorn::validate_forward(sinkhorn_in, sinkhorn_out, options, &problem.sinkhorn,
                                                 {.eps_values = true, .driver_buffer = true}));
  if (in.pre_mix) {
    NamedList inputs = {{"pre_mix", &*in.pre_mix}};
    NamedList outputs = {{"h_in", &out.h_in},       {"h_pre", &out.h_pre},     {"h_post", &out.h_post},
                         {"h_res", &out.h_res},     {"inv_rms", &out.inv_rms}, {"h_mix", &out.h_mix}};
    MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
    problem.pre.pre_mix = s.resolve(*in.pre_mix);
  } else {
    problem.pre.select_first_stream = true;
  }
  *p = problem;
  return {};
}

size_t forward_workspace_bytes(const ForwardProblem& problem, int num_threads) {
  const ForwardLayout l = forward_layout(problem, num_threads);
  return l.z_bytes + l.rest;
}

Status run_forward(const ForwardProblem& original, void* workspace, size_t bytes, int num_threads,
                   const pre::forward::TokenPrologue* prologue) {
  const ForwardLayout l = forward_layout(original, num_threads);
  if (Status s = workspace_error(l.z_bytes + l.rest, bytes, workspace); !s.ok()) return s;
  if (original.pre.dims.T == 0) return {};
  char* base = static_cast<char*>(workspace);
  ForwardProblem p = original;
  p.pre.h_res = contiguous_like(original.pre.h_res, base);
  p.sinkhorn.z = contiguous_like(original.sinkhorn.z, base);
  MHC_RETURN_IF_ERROR(pre::forward::run(p.pre, base + l.z_bytes, l.rest, num_threads, prologue));
  return sinkhorn::run_forward(p.sinkhorn, base + l.z_bytes, l.rest, num_threads);
}

Status run_forward_in_thread_workspace(const ForwardProblem& problem, int num_threads) {
  return in_thread_workspace(forward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre_single_pass
