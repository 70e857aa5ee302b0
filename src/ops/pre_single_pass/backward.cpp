// MhcPreSinglePass's backward (SPEC §14): z_res formed again from the caches as
// the fp32 families' forward forms it, the Sinkhorn's backward recomputed from
// it, then MhcPreBackward with g_pre = grad_h_pre and the collapse's terms taken
// with the carried pre-mix, its sums written to grad_pre_mix.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/composition.hpp"
#include "ops/pre/backward.hpp"
#include "ops/pre/operands.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc::ops::pre_single_pass {
namespace {

constexpr const char* kWhose = "the single pass's";
constexpr const char* kWhy = "the single pass has the residual branch";

// The workspace: z_res [T,R], grad_z [T,R], the stand-in rows (pre_mix = e0 and
// grad_h_pre = 0, N floats each), then the inner drivers' own.
struct BackwardLayout {
  size_t z_bytes, rows_bytes, rest;
  size_t total() const { return 2 * z_bytes + rows_bytes + rest; }
};

// A per-token [B,S,N] view of one row of N floats at `data`: every token reads it.
core::Strided shared_row(const core::Strided& like, float* data) {
  core::Strided row = contiguous_like(like, data);
  row.stride[0] = row.stride[1] = 0;
  return row;
}

// The problem with its workspace buffers at `base` (kSizingAddress while sizing).
BackwardProblem placed(const BackwardProblem& original, char* base, const BackwardLayout& l) {
  BackwardProblem p = original;
  p.sinkhorn.z = contiguous_like(original.sinkhorn.z, base);
  p.sinkhorn.grad_z = contiguous_like(original.sinkhorn.grad_z, base + l.z_bytes);
  p.pre.grad_h_res = contiguous_like(original.pre.grad_h_res, base + l.z_bytes);
  float* rows = reinterpret_cast<float*>(base + 2 * l.z_bytes);
  const core::Strided& per_token = original.pre.h_pre;  // [B,S,N]
  if (original.own_h_pre) {
    p.pre.grad_h_pre_adds = p.pre.grad_h_pre.present();
    return p;
  }
  if (!p.pre.pre_mix.present()) p.pre.pre_mix = shared_row(per_token, rows);
  if (!p.pre.grad_h_pre.present()) p.pre.grad_h_pre = shared_row(per_token, rows + original.pre.dims.N);
  return p;
}

BackwardLayout backward_layout(const BackwardProblem& problem, int num_threads) {
  const core::Dims& d = problem.pre.dims;
  BackwardLayout l{aligned64(size_t(d.T * d.R) * sizeof(float)), aligned64(size_t(2 * d.N) * sizeof(float)), 0};
  const BackwardProblem sized = placed(problem, static_cast<char*>(kSizingAddress), l);
  l.rest = std::max(sinkhorn::backward_workspace_bytes(sized.sinkhorn, num_threads),
                    pre::backward::workspace_bytes(sized.pre, num_threads));
  return l;
}

}  // namespace

Status validate_backward(const PreSinglePassBackwardInputs& in, const PreSinglePassBackwardOutputs& out,
                         const Options& options, BackwardProblem* p, const Rules& rules) {
  BackwardProblem problem;
  MHC_RETURN_IF_ERROR(check_residual_branch(in.x, in.phi, in.alpha, kWhose, kWhy));
  const PreBackwardInputs pre_in{in.x,      in.phi,   in.alpha, in.grad_h_in, in.grad_h_post, in.grad_h_res,
                                 in.inv_rms, in.h_mix, in.h_pre, in.h_post,    in.gamma,       in.grad_x_post};
  const PreBackwardOutputs pre_out{out.grad_x, out.grad_phi, out.grad_alpha, out.grad_bias, out.grad_gamma};
  MHC_RETURN_IF_ERROR(pre::backward::validate(pre_in, pre_out, options, &problem.pre,
                                              {.eps_values = true, .grad_x_in_workspace = rules.grad_x_in_workspace}));
  const core::Dims& d = problem.pre.dims;
  MHC_RETURN_IF_ERROR(check_fp32("bias", in.bias, {{{d.F}, {"F"}}}));
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  const ShapeOption per_stream = s.shape({"N"}, {d.N});
  if (in.pre_mix) MHC_RETURN_IF_ERROR(check_fp32("pre_mix", *in.pre_mix, {per_stream}));
  if (in.grad_h_pre) MHC_RETURN_IF_ERROR(check_fp32("grad_h_pre", *in.grad_h_pre, {per_stream}));
  if (out.grad_pre_mix) {
    if (!in.pre_mix)
      return null_error("grad_pre_mix", "given without pre_mix (the first site has no pre-mix to differentiate)");
    MHC_RETURN_IF_ERROR(check_fp32("grad_pre_mix", *out.grad_pre_mix, {per_stream}));
  }
  MHC_RETURN_IF_ERROR(check_eps("sinkhorn_eps", in.sinkhorn_eps));
  const TensorView grad_h_res = as_matrices(in.grad_h_res, d.N, s.leading());
  // The Sinkhorn recomputes from z, which lives in the workspace: grad_h_res's view stands for its shape.
  const SinkhornBackwardInputs sinkhorn_in{grad_h_res, std::nullopt, std::nullopt, grad_h_res, in.sinkhorn_eps,
                                           in.num_iters};
  const SinkhornBackwardOutputs sinkhorn_out{grad_h_res};
  MHC_RETURN_IF_ERROR(sinkhorn::validate_backward(sinkhorn_in, sinkhorn_out, options, &problem.sinkhorn,
                                                  {.eps_values = true, .driver_buffer = true}));
  NamedList inputs = {{"bias", &in.bias}};
  if (in.pre_mix) inputs.push_back({"pre_mix", &*in.pre_mix});
  if (in.grad_h_pre) inputs.push_back({"grad_h_pre", &*in.grad_h_pre});
  NamedList outputs;
  if (!rules.grad_x_in_workspace) outputs.push_back({"grad_x", &out.grad_x});
  for (const Named& n : {Named{"grad_phi", &out.grad_phi}, Named{"grad_alpha", &out.grad_alpha},
                         Named{"grad_bias", &out.grad_bias}})
    outputs.push_back(n);
  if (out.grad_gamma) outputs.push_back({"grad_gamma", &*out.grad_gamma});
  if (out.grad_pre_mix) {
    outputs.push_back({"grad_pre_mix", &*out.grad_pre_mix});
    // grad_pre_mix against every input the pre block's checks saw too
    for (const auto& [name, view] : {Named{"x", &in.x}, Named{"phi", &in.phi}, Named{"alpha", &in.alpha},
                                     Named{"grad_h_in", &in.grad_h_in}, Named{"grad_h_post", &in.grad_h_post},
                                     Named{"grad_h_res", &in.grad_h_res}, Named{"inv_rms", &in.inv_rms},
                                     Named{"h_mix", &in.h_mix}, Named{"h_pre", &in.h_pre},
                                     Named{"h_post", &in.h_post}})
      inputs.push_back({name, view});
    if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
    if (in.grad_x_post) inputs.push_back({"grad_x_post", &*in.grad_x_post});
  }
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, &out.grad_x,
                                             in.grad_x_post ? &*in.grad_x_post : nullptr));
  if (in.pre_mix) problem.pre.pre_mix = s.resolve(*in.pre_mix);
  if (in.grad_h_pre) problem.pre.grad_h_pre = s.resolve(*in.grad_h_pre);
  if (out.grad_pre_mix) problem.pre.grad_pre_mix = s.resolve(*out.grad_pre_mix);
  problem.bias = resolve_plain_tensor(in.bias);
  *p = problem;
  return {};
}

size_t backward_workspace_bytes(const BackwardProblem& problem, int num_threads) {
  return backward_layout(problem, num_threads).total();
}

Status run_backward(const BackwardProblem& original, void* workspace, size_t bytes, int num_threads) {
  const BackwardLayout l = backward_layout(original, num_threads);
  if (Status s = workspace_error(l.total(), bytes, workspace); !s.ok()) return s;
  char* base = static_cast<char*>(workspace);
  const BackwardProblem p = placed(original, base, l);
  const core::Dims& d = p.pre.dims;
  float* rows = reinterpret_cast<float*>(base + 2 * l.z_bytes);
  std::fill_n(rows, 2 * d.N, 0.0f);
  if (!original.pre.pre_mix.present() && !original.own_h_pre) rows[0] = 1.0f;  // the first site selects stream 0
  // z_res = alpha_res (r m) + bias, as the fp32 families' forward forms it.
  const float alpha_res = p.pre.alpha.load(p.pre.alpha.at(0, 2));
  for (int64_t t = 0; t < d.T; ++t) {
    const float r = p.pre.inv_rms.load(p.pre.inv_rms.token_offset(t));
    for (int64_t i = 0; i < d.R; ++i) {
      const float m = p.pre.h_mix.load(p.pre.h_mix.at(t, 0, 2 * d.N + i));
      p.sinkhorn.z.store(p.sinkhorn.z.residual_at(t, i), alpha_res * (r * m) + p.bias.load(p.bias.at(0, 2 * d.N + i)));
    }
  }
  char* rest = base + 2 * l.z_bytes + l.rows_bytes;
  MHC_RETURN_IF_ERROR(sinkhorn::run_backward(p.sinkhorn, rest, l.rest, num_threads));
  return pre::backward::run(p.pre, rest, l.rest, num_threads);
}

Status run_backward_in_thread_workspace(const BackwardProblem& problem, int num_threads) {
  return in_thread_workspace(backward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_backward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre_single_pass
