// The layer targets' parts for the site backward (fuzz_layer.hpp, SPEC §15): its
// prepare (the target's forward) and its finish (the backward, either variant) —
// their tensors, the C++ face's call, validation and sizing through the operator
// layer, and the unfused chain an accepted call must equal bit for bit on every
// family. Generation, the C face, the checks and the rerun oracle are
// fuzz_layer.cpp's, shared with the others.
#include <optional>
#include <string>
#include <vector>

#include "fuzz_layer.hpp"
#include "mhc/mhc.hpp"
#include "ops/post/post.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"
#include "ops/site_backward/site_backward.hpp"

namespace mhc_fuzz::layer {
namespace {

mhc::SiteBackwardPrepareInputs prepare_in(const Views& v) {
  return {v.req("grad_x_next"), v.req("x"), v.opt("h_res"), v.req("h_out"), v.req("h_post")};
}
mhc::SiteBackwardPrepareOutputs prepare_out(const Views& v) {
  return {v.opt("grad_h_res"), v.req("grad_h_out"), v.req("grad_h_post")};
}
mhc::SiteBackwardFinishInputs finish_in(const Views& v, const LayerProblem& p) {
  return {v.req("x"),         v.req("phi"),         v.req("alpha"),       v.req("bias"),       v.opt("gamma"),
          v.opt("pre_mix"),   v.opt("h_res"),       v.opt("grad_x_next"), v.req("grad_h_in"),  v.opt("grad_h_pre"),
          v.req("grad_h_post"), v.req("grad_h_res"), v.req("inv_rms"),    v.req("h_mix"),      v.req("h_pre"),
          v.req("h_post"),    int64_t(p.v41),       p.eps,                p.I};
}
mhc::SiteBackwardFinishOutputs finish_out(const Views& v) {
  return {v.req("grad_x"),     v.opt("grad_pre_mix"), v.req("grad_phi"),
          v.req("grad_alpha"), v.req("grad_bias"),    v.opt("grad_gamma")};
}

// x's token dims followed by `inner` (the validated x: [B,S,N,D] or [T,N,D]).
std::vector<int64_t> tokens_of(const mhc::TensorView& x, std::initializer_list<int64_t> inner) {
  std::vector<int64_t> s(x.shape.begin(), x.shape.begin() + (x.rank - 2));
  s.insert(s.end(), inner.begin(), inner.end());
  return s;
}

}  // namespace

std::vector<Slot> site_slots(const LayerProblem& p) {
  const int32_t f32 = MHC_FP32, xt = int32_t(p.x_dtype);
  const int64_t N = p.N, D = p.D, F = p.F(), K = p.K();
  const std::vector<int64_t> mat = tokens(p, {N, N}), res = p.flat ? tokens(p, {N * N}) : mat;
  if (!p.backward)  // prepare: grad_x_next in x's dtype, now and then fp32 (a rejection)
    return {{"grad_x_next", false, true, p.grad_x_dtype, tokens(p, {N, D}), true},
            {"x", false, true, xt, tokens(p, {N, D}), true},
            {"h_res", false, p.h_res, f32, mat, true},
            {"h_out", false, true, xt, tokens(p, {D}), true},
            {"h_post", false, true, f32, tokens(p, {N}), true},
            {"grad_h_res", true, p.grad_h_res, f32, mat, true},
            {"grad_h_out", true, true, xt, tokens(p, {D}), true},
            {"grad_h_post", true, true, f32, tokens(p, {N}), true}};
  return {{"x", false, true, xt, tokens(p, {N, D}), true},
          {"phi", false, true, f32, {F, K}, false},
          {"alpha", false, true, f32, {3}, false},
          {"bias", false, true, f32, {F}, false},
          {"gamma", false, p.gamma, f32, {N, D}, false},
          {"pre_mix", false, p.pre_mix, f32, tokens(p, {N}), true},
          {"h_res", false, p.h_res, f32, mat, true},
          {"grad_x_next", false, p.grad_x_post, p.grad_x_dtype, tokens(p, {N, D}), true},
          {"grad_h_in", false, true, xt, tokens(p, {D}), true},
          {"grad_h_pre", false, p.grad_h_pre, f32, tokens(p, {N}), true},
          {"grad_h_post", false, true, f32, tokens(p, {N}), true},
          {"grad_h_res", false, true, f32, res, true},
          {"inv_rms", false, true, f32, tokens(p, {}), true},
          {"h_mix", false, true, f32, tokens(p, {F}), true},
          {"h_pre", false, true, f32, tokens(p, {N}), true},
          {"h_post", false, true, f32, tokens(p, {N}), true},
          {"grad_x", true, true, xt, tokens(p, {N, D}), true},
          {"grad_pre_mix", true, p.grad_pre_mix, f32, tokens(p, {N}), true},
          {"grad_phi", true, true, f32, {F, K}, false},
          {"grad_alpha", true, true, f32, {3}, false},
          {"grad_bias", true, true, f32, {F}, false},
          {"grad_gamma", true, p.gamma, f32, {N, D}, false}};
}

mhc::Status site_call_cpp(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o) {
  const Views v{c, base};
  return p.backward ? mhc::site_backward_finish(finish_in(v, p), finish_out(v), o)
                    : mhc::site_backward_prepare(prepare_in(v), prepare_out(v), o);
}

mhc::Status site_validate(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o, bool size) {
  namespace site = mhc::ops::site_backward;
  const Views v{c, base};
  mhc::Status s;
  size_t bytes = 0;
  if (p.backward) {
    mhc::ops::pre_single_pass::BackwardProblem q;
    s = site::validate_finish(finish_in(v, p), finish_out(v), o, &q);
    if (s.ok() && size) bytes = mhc::ops::pre_single_pass::backward_workspace_bytes(q, o.num_threads);
  } else {
    mhc::core::PostProblem q;
    s = site::validate_prepare(prepare_in(v), prepare_out(v), o, &q);
    if (s.ok() && size) bytes = mhc::ops::post::backward_workspace_bytes(q, o.num_threads);
  }
  (void)bytes;
  return s;
}

// SPEC §15's definition of the site backward, operator by operator, on `copy` (the
// arena as it was; the same family and options): prepare is post_backward with an
// fp32 grad_x (scratch); finish is that post_backward's fp32 grad_x (from grad_x_next
// and h_res, into scratch; none without grad_x_next) handed as grad_x_post to the
// site's pre backward: pre_single_pass_backward (V4.1), or, for V4,
// sinkhorn_backward from z_res formed again from the caches in fp32 (as the fused
// backward forms it) then pre_backward. pre_backward takes no grad_h_pre, so V4 with
// a grad_h_pre takes the composition MhcPostPre's backward uses instead: the single
// pass's backward through the operator layer with its own h_pre (own_h_pre), fed the
// same fp32 grad_x_post.
void site_unfused(Case& c, const LayerProblem& p, uint8_t* copy, const mhc::Options& o) {
  const Views v{c, copy};
  const auto must = [&](const mhc::Status& s, const char* step) {
    if (!s.ok()) fail(std::string(p.name()) + ": the unfused " + step + " failed where the site ran: " + s.message());
  };
  if (!p.backward) {
    const mhc::SiteBackwardPrepareInputs in = prepare_in(v);
    const mhc::SiteBackwardPrepareOutputs out = prepare_out(v);
    const int64_t N = in.x.shape[in.x.rank - 2], D = in.x.shape[in.x.rank - 1];
    Scratch grad_x(tokens_of(in.x, {N, D}));
    must(mhc::post_backward({in.grad_x_next, in.x, in.h_res, in.h_out, in.h_post},
                            {grad_x.view, out.grad_h_res, out.grad_h_out, out.grad_h_post}, o),
         "post_backward");
    return;
  }
  const mhc::SiteBackwardFinishInputs in = finish_in(v, p);
  const mhc::SiteBackwardFinishOutputs out = finish_out(v);
  const int token_dims = in.x.rank - 2;
  const int64_t N = in.x.shape[in.x.rank - 2], D = in.x.shape[in.x.rank - 1];
  // The post's backward: only its fp32 grad_x is the finish's; its other outputs, and
  // the h_out and h_post it reads for them, are scratch.
  Scratch post_grad_x(tokens_of(in.x, {N, D}));
  std::optional<mhc::TensorView> grad_x_post;
  if (in.grad_x_next) {
    Scratch h_out(tokens_of(in.x, {D})), h_post(tokens_of(in.x, {N})), grad_h_out(tokens_of(in.x, {D})),
        grad_h_post(tokens_of(in.x, {N}));
    h_out.view.dtype = grad_h_out.view.dtype = in.x.dtype;  // fp32 storage, large enough for any dtype
    must(mhc::post_backward({*in.grad_x_next, in.x, in.h_res, h_out.view, h_post.view},
                            {post_grad_x.view, std::nullopt, grad_h_out.view, grad_h_post.view}, o),
         "post_backward");
    grad_x_post = post_grad_x.view;
  }
  const mhc::PreSinglePassBackwardInputs single_in{
      in.x,           in.phi,          in.alpha,      in.bias,      in.gamma,   in.pre_mix,
      in.grad_h_in,   in.grad_h_pre,   in.grad_h_post, in.grad_h_res, in.inv_rms, in.h_mix,
      in.h_pre,       in.h_post,       grad_x_post,   in.sinkhorn_eps, in.num_iters};
  const mhc::PreSinglePassBackwardOutputs single_out{out.grad_x,     out.grad_pre_mix, out.grad_phi,
                                                     out.grad_alpha, out.grad_bias,    out.grad_gamma};
  if (in.single_pass == 1) {
    must(mhc::pre_single_pass_backward(single_in, single_out, o), "pre_single_pass_backward");
    return;
  }
  if (in.grad_h_pre) {  // V4 with grad_h_pre: MhcPostPre's composition (ops/post_pre/backward.cpp)
    mhc::ops::pre_single_pass::BackwardProblem q;
    must(mhc::ops::pre_single_pass::validate_backward(single_in, single_out, o, &q), "single pass's validation");
    q.own_h_pre = true;
    must(mhc::ops::pre_single_pass::run_backward_in_thread_workspace(q, o.num_threads), "V4 pre backward");
    return;
  }
  // z_res = alpha_res (r m) + bias, each factor read as the fused call's validation resolves it.
  mhc::ops::pre_single_pass::BackwardProblem q;
  must(mhc::ops::site_backward::validate_finish(in, out, o, &q), "revalidation");
  const int64_t T = q.pre.dims.T, R = N * N;
  Scratch z(tokens_of(in.x, {N, N})), grad_z(tokens_of(in.x, {N, N}));
  const float alpha_res = q.pre.alpha.load(q.pre.alpha.at(0, 2));
  for (int64_t t = 0; t < T; ++t) {
    const float r = q.pre.inv_rms.load(q.pre.inv_rms.token_offset(t));
    for (int64_t i = 0; i < R; ++i) {
      const float m = q.pre.h_mix.load(q.pre.h_mix.at(t, 0, 2 * N + i));
      z.data[size_t(t * R + i)] = alpha_res * (r * m) + q.bias.load(q.bias.at(0, 2 * N + i));
    }
  }
  mhc::SinkhornBackwardInputs sin;
  sin.grad_h_res = as_matrices(in.grad_h_res, N, token_dims);
  sin.z = z.view;
  sin.eps = in.sinkhorn_eps;
  sin.num_iters = in.num_iters;
  must(mhc::sinkhorn_backward(sin, {grad_z.view}, o), "sinkhorn_backward");
  must(mhc::pre_backward({in.x, in.phi, in.alpha, in.grad_h_in, in.grad_h_post, grad_z.view, in.inv_rms, in.h_mix,
                          in.h_pre, in.h_post, in.gamma, grad_x_post},
                         {out.grad_x, out.grad_phi, out.grad_alpha, out.grad_bias, out.grad_gamma}, o),
       "pre_backward");
}

}  // namespace mhc_fuzz::layer
