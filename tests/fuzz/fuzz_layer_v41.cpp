// The layer targets' parts for DeepSeek-V4.1's operators and the fused boundary
// (fuzz_layer.hpp, SPEC §14-§16): MhcPreSinglePass, MhcCollapse, MhcPostPre and MhcRmsNorm,
// forward and backward — their tensors, the C++ face's call, validation and sizing
// through the operator layer, the single pass's first-site oracle and the
// boundary's unfused chain. Generation, the C face, the checks and the
// reference-family and rerun oracles are fuzz_layer.cpp's, shared with the others.
#include <cstring>
#include <string>

#include "core/dtype.hpp"
#include "fuzz_layer.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"
#include "ops/collapse/collapse.hpp"
#include "ops/post_pre/post_pre.hpp"
#include "ops/rms_norm/rms_norm.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"

namespace mhc_fuzz::layer {
namespace {

mhc::PreSinglePassForwardInputs spf_in(const Views& v, const LayerProblem& p) {
  return {v.req("x"), v.req("phi"), v.req("alpha"), v.req("bias"), v.opt("gamma"), v.opt("pre_mix"), p.eps, p.I};
}
mhc::PreSinglePassForwardOutputs spf_out(const Views& v) {
  return {v.req("h_in"), v.req("h_pre"), v.req("h_post"), v.req("h_res"), v.req("inv_rms"), v.req("h_mix")};
}
mhc::PreSinglePassBackwardInputs spb_in(const Views& v, const LayerProblem& p) {
  return {v.req("x"),
          v.req("phi"),
          v.req("alpha"),
          v.req("bias"),
          v.opt("gamma"),
          v.opt("pre_mix"),
          v.req("grad_h_in"),
          v.opt("grad_h_pre"),
          v.req("grad_h_post"),
          v.req("grad_h_res"),
          v.req("inv_rms"),
          v.req("h_mix"),
          v.req("h_pre"),
          v.req("h_post"),
          v.opt("grad_x_post"),
          p.eps,
          p.I};
}
mhc::PreSinglePassBackwardOutputs spb_out(const Views& v) {
  return {v.req("grad_x"),     v.opt("grad_pre_mix"), v.req("grad_phi"),
          v.req("grad_alpha"), v.req("grad_bias"),    v.opt("grad_gamma")};
}
mhc::CollapseForwardInputs cf_in(const Views& v) { return {v.req("x"), v.req("pre_mix")}; }
mhc::CollapseForwardOutputs cf_out(const Views& v) { return {v.req("h")}; }
mhc::CollapseBackwardInputs cb_in(const Views& v) { return {v.req("grad_h"), v.req("x"), v.req("pre_mix")}; }
mhc::CollapseBackwardOutputs cb_out(const Views& v) { return {v.req("grad_x"), v.req("grad_pre_mix")}; }
mhc::PostPreForwardInputs bf_in(const Views& v, const LayerProblem& p) {
  return {v.req("x"),    v.opt("h_res"),   v.req("h_out"), v.req("h_post"), v.req("phi"), v.req("alpha"),
          v.req("bias"), v.opt("gamma"),   v.opt("pre_mix"), int64_t(p.v41), p.eps,      p.I};
}
mhc::PostPreForwardOutputs bf_out(const Views& v) {
  return {v.req("x_next"),     v.req("h_in"),    v.req("h_pre"), v.req("h_post_next"),
          v.req("h_res_next"), v.req("inv_rms"), v.req("h_mix")};
}
mhc::PostPreBackwardInputs bb_in(const Views& v, const LayerProblem& p) {
  return {v.req("x"),         v.opt("h_res"),       v.req("h_out"),           v.req("h_post"),
          v.req("phi"),       v.req("alpha"),       v.req("bias"),            v.opt("gamma"),
          v.opt("pre_mix"),   v.req("x_next"),      v.opt("grad_x_next"),     v.req("grad_h_in"),
          v.opt("grad_h_pre"), v.req("grad_h_post_next"), v.req("grad_h_res_next"), v.req("inv_rms"),
          v.req("h_mix"),     v.req("h_pre"),       v.req("h_post_next"),     int64_t(p.v41),
          p.eps,              p.I};
}
mhc::PostPreBackwardOutputs bb_out(const Views& v) {
  return {v.req("grad_x"),   v.opt("grad_h_res"), v.req("grad_h_out"), v.req("grad_h_post"), v.opt("grad_pre_mix"),
          v.req("grad_phi"), v.req("grad_alpha"), v.req("grad_bias"),  v.opt("grad_gamma")};
}

mhc::RmsNormForwardInputs rf_in(const Views& v, const LayerProblem& p) { return {v.req("x"), v.req("weight"), p.eps}; }
mhc::RmsNormForwardOutputs rf_out(const Views& v) { return {v.req("y")}; }

std::vector<Slot> boundary_slots(const LayerProblem& p, const std::vector<int64_t>& res) {
  const int32_t f32 = MHC_FP32, xt = int32_t(p.x_dtype);
  const int64_t N = p.N, D = p.D, F = p.F(), K = p.K();
  std::vector<Slot> slots = {{"x", false, true, xt, tokens(p, {N, D}), true},
                             {"h_res", false, p.h_res, f32, tokens(p, {N, N}), true},
                             {"h_out", false, true, xt, tokens(p, {D}), true},
                             {"h_post", false, true, f32, tokens(p, {N}), true},
                             {"phi", false, true, f32, {F, K}, false},
                             {"alpha", false, true, f32, {3}, false},
                             {"bias", false, true, f32, {F}, false},
                             {"gamma", false, p.gamma, f32, {N, D}, false},
                             {"pre_mix", false, p.pre_mix, f32, tokens(p, {N}), true}};
  const std::initializer_list<Slot> forward = {{"x_next", true, true, xt, tokens(p, {N, D}), true},
                                               {"h_in", true, true, xt, tokens(p, {D}), true},
                                               {"h_pre", true, true, f32, tokens(p, {N}), true},
                                               {"h_post_next", true, true, f32, tokens(p, {N}), true},
                                               {"h_res_next", true, true, f32, res, true},
                                               {"inv_rms", true, true, f32, tokens(p, {}), true},
                                               {"h_mix", true, true, f32, tokens(p, {F}), true}};
  const std::initializer_list<Slot> backward = {
      {"x_next", false, true, xt, tokens(p, {N, D}), true},
      {"grad_x_next", false, p.grad_x_post, p.grad_x_dtype, tokens(p, {N, D}), true},
      {"grad_h_in", false, true, xt, tokens(p, {D}), true},
      {"grad_h_pre", false, p.grad_h_pre, f32, tokens(p, {N}), true},
      {"grad_h_post_next", false, true, f32, tokens(p, {N}), true},
      {"grad_h_res_next", false, true, f32, res, true},
      {"inv_rms", false, true, f32, tokens(p, {}), true},
      {"h_mix", false, true, f32, tokens(p, {F}), true},
      {"h_pre", false, true, f32, tokens(p, {N}), true},
      {"h_post_next", false, true, f32, tokens(p, {N}), true},
      {"grad_x", true, true, p.grad_x_dtype, tokens(p, {N, D}), true},
      {"grad_h_res", true, p.grad_h_res, f32, tokens(p, {N, N}), true},
      {"grad_h_out", true, true, xt, tokens(p, {D}), true},
      {"grad_h_post", true, true, f32, tokens(p, {N}), true},
      {"grad_pre_mix", true, p.grad_pre_mix, f32, tokens(p, {N}), true},
      {"grad_phi", true, true, f32, {F, K}, false},
      {"grad_alpha", true, true, f32, {3}, false},
      {"grad_bias", true, true, f32, {F}, false},
      {"grad_gamma", true, p.gamma, f32, {N, D}, false}};
  slots.insert(slots.end(), p.backward ? backward : forward);
  return slots;
}

}  // namespace

std::vector<Slot> v41_slots(const LayerProblem& p) {
  const int32_t f32 = MHC_FP32, xt = int32_t(p.x_dtype);
  const int64_t N = p.N, D = p.D, F = p.F(), K = p.K();
  const std::vector<int64_t> res = p.flat ? tokens(p, {N * N}) : tokens(p, {N, N});
  if (p.op == LayerOp::post_pre) return boundary_slots(p, res);
  if (p.op == LayerOp::rms_norm)  // weight in x's dtype, or fp32 when grad_x_dtype is drawn as fp32
    return {{"x", false, true, xt, tokens(p, {D}), true},
            {"weight", false, true, p.grad_x_dtype, {D}, false},
            {"y", true, true, xt, tokens(p, {D}), true}};
  if (p.op == LayerOp::collapse) {
    if (!p.backward)
      return {{"x", false, true, xt, tokens(p, {N, D}), true},
              {"pre_mix", false, true, f32, tokens(p, {N}), true},
              {"h", true, true, xt, tokens(p, {D}), true}};
    return {{"grad_h", false, true, xt, tokens(p, {D}), true},
            {"x", false, true, xt, tokens(p, {N, D}), true},
            {"pre_mix", false, true, f32, tokens(p, {N}), true},
            {"grad_x", true, true, xt, tokens(p, {N, D}), true},
            {"grad_pre_mix", true, true, f32, tokens(p, {N}), true}};
  }
  std::vector<Slot> slots = {{"x", false, true, xt, tokens(p, {N, D}), true},
                             {"phi", false, true, f32, {F, K}, false},
                             {"alpha", false, true, f32, {3}, false},
                             {"bias", false, true, f32, {F}, false},
                             {"gamma", false, p.gamma, f32, {N, D}, false},
                             {"pre_mix", false, p.pre_mix, f32, tokens(p, {N}), true}};
  if (!p.backward) {
    for (const Slot& s : std::initializer_list<Slot>{{"h_in", true, true, xt, tokens(p, {D}), true},
                                                     {"h_pre", true, true, f32, tokens(p, {N}), true},
                                                     {"h_post", true, true, f32, tokens(p, {N}), true},
                                                     {"h_res", true, true, f32, res, true},
                                                     {"inv_rms", true, true, f32, tokens(p, {}), true},
                                                     {"h_mix", true, true, f32, tokens(p, {F}), true}})
      slots.push_back(s);
    return slots;
  }
  for (const Slot& s : std::initializer_list<Slot>{
           {"grad_h_in", false, true, xt, tokens(p, {D}), true},
           {"grad_h_pre", false, p.grad_h_pre, f32, tokens(p, {N}), true},
           {"grad_h_post", false, true, f32, tokens(p, {N}), true},
           {"grad_h_res", false, true, f32, res, true},
           {"inv_rms", false, true, f32, tokens(p, {}), true},
           {"h_mix", false, true, f32, tokens(p, {F}), true},
           {"h_pre", false, true, f32, tokens(p, {N}), true},
           {"h_post", false, true, f32, tokens(p, {N}), true},
           {"grad_x_post", false, p.grad_x_post, p.grad_x_dtype, tokens(p, {N, D}), true},
           {"grad_x", true, true, xt, tokens(p, {N, D}), true},
           {"grad_pre_mix", true, p.grad_pre_mix, f32, tokens(p, {N}), true},
           {"grad_phi", true, true, f32, {F, K}, false},
           {"grad_alpha", true, true, f32, {3}, false},
           {"grad_bias", true, true, f32, {F}, false},
           {"grad_gamma", true, p.gamma, f32, {N, D}, false}})
    slots.push_back(s);
  return slots;
}

mhc::Status v41_call_cpp(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o) {
  const Views v{c, base};
  if (p.op == LayerOp::rms_norm) return mhc::rms_norm_forward(rf_in(v, p), rf_out(v), o);
  if (p.op == LayerOp::post_pre)
    return p.backward ? mhc::post_pre_backward(bb_in(v, p), bb_out(v), o)
                      : mhc::post_pre_forward(bf_in(v, p), bf_out(v), o);
  if (p.op == LayerOp::collapse)
    return p.backward ? mhc::collapse_backward(cb_in(v), cb_out(v), o) : mhc::collapse_forward(cf_in(v), cf_out(v), o);
  return p.backward ? mhc::pre_single_pass_backward(spb_in(v, p), spb_out(v), o)
                    : mhc::pre_single_pass_forward(spf_in(v, p), spf_out(v), o);
}

mhc::Status v41_validate(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o, bool size) {
  namespace single_pass = mhc::ops::pre_single_pass;
  namespace collapse = mhc::ops::collapse;
  namespace post_pre = mhc::ops::post_pre;
  const Views v{c, base};
  mhc::Status s;
  size_t bytes = 0;
  if (p.op == LayerOp::rms_norm) {
    mhc::ops::rms_norm::Problem q;
    s = mhc::ops::rms_norm::validate_forward(rf_in(v, p), rf_out(v), o, &q);
    if (s.ok() && size) bytes = mhc::ops::rms_norm::workspace_bytes(q, o.num_threads);
  } else if (p.op == LayerOp::post_pre) {
    if (p.backward) {
      post_pre::BackwardProblem q;
      s = post_pre::validate_backward(bb_in(v, p), bb_out(v), o, &q);
      if (s.ok() && size) bytes = post_pre::backward_workspace_bytes(q, o.num_threads);
    } else {
      post_pre::ForwardProblem q;
      s = post_pre::validate_forward(bf_in(v, p), bf_out(v), o, &q);
      if (s.ok() && size) bytes = post_pre::forward_workspace_bytes(q, o.num_threads);
    }
  } else if (p.op == LayerOp::collapse) {
    collapse::Problem q;
    s = p.backward ? collapse::validate_backward(cb_in(v), cb_out(v), o, &q)
                   : collapse::validate_forward(cf_in(v), cf_out(v), o, &q);
    if (s.ok() && size) bytes = collapse::workspace_bytes(q, !p.backward, o.num_threads);
  } else if (p.backward) {
    single_pass::BackwardProblem q;
    s = single_pass::validate_backward(spb_in(v, p), spb_out(v), o, &q);
    if (s.ok() && size) bytes = single_pass::backward_workspace_bytes(q, o.num_threads);
  } else {
    single_pass::ForwardProblem q;
    s = single_pass::validate_forward(spf_in(v, p), spf_out(v), o, &q);
    if (s.ok() && size) bytes = single_pass::forward_workspace_bytes(q, o.num_threads);
  }
  (void)bytes;
  return s;
}

// The first single-pass site (no pre_mix) selects stream 0: h_in is x[.., 0, :] bit
// for bit (SPEC §14), on every fp32 family (the float64 reference forms it in float64).
void v41_check_first_site(Case& c, const LayerProblem& p, uint8_t* after, const mhc::Options& o) {
  if (p.op != LayerOp::single_pass || p.backward || c.find("pre_mix")->present) return;
  const Views v{c, after};
  mhc::ops::pre_single_pass::ForwardProblem q;
  const mhc::Status s = mhc::ops::pre_single_pass::validate_forward(spf_in(v, p), spf_out(v), o, &q);
  if (!s.ok()) fail(std::string(p.name()) + ": revalidation failed: " + s.message());
  const mhc::core::Strided &x = q.pre.x, &h_in = q.pre.h_in;
  const size_t esize = mhc::core::element_size(x.dtype);
  for (int64_t t = 0; t < q.pre.dims.T; ++t)
    for (int64_t d = 0; d < q.pre.dims.D; ++d) {
      const uint8_t* want = static_cast<const uint8_t*>(x.data) + x.at(t, 0, d) * int64_t(esize);
      const uint8_t* got = static_cast<const uint8_t*>(h_in.data) + h_in.at(t, 0, d) * int64_t(esize);
      if (std::memcmp(got, want, esize) != 0)
        fail(std::string(p.name()) + ": without pre_mix, h_in token " + std::to_string(t) + " element " +
             std::to_string(d) + " is not x's stream 0: " +
             std::to_string(mhc::core::load_element(got, x.dtype, 0)) + " vs " +
             std::to_string(mhc::core::load_element(want, x.dtype, 0)));
    }
}

// MhcPostPre's forward as the unfused chain writes it (SPEC §15): MhcPost into x_next,
// then on x_next site s+1's pre — MhcPreSinglePass (V4.1), or MhcPre then MhcSinkhorn
// on its z_res (V4) — each operator's own validation and family.
void v41_unfused_boundary(Case& c, const LayerProblem& p, uint8_t* copy, const mhc::Options& o) {
  const Views v{c, copy};
  const mhc::PostPreForwardInputs in = bf_in(v, p);
  const mhc::PostPreForwardOutputs out = bf_out(v);
  const int token_dims = in.x.rank - 2;
  const int64_t N = in.x.shape[in.x.rank - 2];
  const auto must = [&](const mhc::Status& s, const char* step) {
    if (!s.ok()) fail(std::string(p.name()) + ": the unfused " + step + " failed where the boundary ran: " + s.message());
  };
  must(mhc::post_forward({in.x, in.h_res, in.h_out, in.h_post}, {out.x_next}, o), "post_forward");
  if (p.v41) {
    must(mhc::pre_single_pass_forward({out.x_next, in.phi, in.alpha, in.bias, in.gamma, in.pre_mix, in.sinkhorn_eps,
                                       in.num_iters},
                                      {out.h_in, out.h_pre, out.h_post_next, out.h_res_next, out.inv_rms, out.h_mix}, o),
         "pre_single_pass_forward");
    return;
  }
  std::vector<int64_t> z_shape(in.x.shape.begin(), in.x.shape.begin() + token_dims);
  z_shape.insert(z_shape.end(), {N, N});
  Scratch z(z_shape);
  must(mhc::pre_forward({out.x_next, in.phi, in.alpha, in.bias, in.gamma},
                        {out.h_in, out.h_post_next, z.view, out.inv_rms, out.h_mix, out.h_pre}, o),
       "pre_forward");
  must(mhc::sinkhorn_forward({z.view, in.sinkhorn_eps, in.num_iters},
                             {as_matrices(out.h_res_next, N, token_dims), std::nullopt, std::nullopt}, o),
       "sinkhorn_forward");
}

}  // namespace mhc_fuzz::layer
