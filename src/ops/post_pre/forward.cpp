// MhcPostPre (SPEC §15): the post's validation on site s's tensors, the pre's on
// x_next, each message in this operator's names; then MhcPost into x_next and the
// pre (V4 or V4.1) from it.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/composition.hpp"
#include "ops/post/post.hpp"
#include "ops/post_pre/post_pre.hpp"
#include "ops/pre/operands.hpp"

namespace mhc::ops::post_pre {

// The pre's names for site s+1's tensors.
#define MHC_POST_PRE_PRE_NAMES \
  {{"x", "x_next"}, {"h_post", "h_post_next"}, {"h_res", "h_res_next"}}

Status validate_forward(const PostPreForwardInputs& in, const PostPreForwardOutputs& out, const Options& options,
                        ForwardProblem* p) {
  ForwardProblem problem;
  MHC_RETURN_IF_ERROR(renamed(post::validate_forward({in.x, in.h_res, in.h_out, in.h_post}, {out.x_next}, options,
                                                     &problem.post),
                              {{"out", "x_next"}}));
  MHC_RETURN_IF_ERROR(check_site_variant(in.single_pass, in.pre_mix.has_value(), false));
  const PreSinglePassForwardInputs pre_in{out.x_next, in.phi,     in.alpha,          in.bias,
                                          in.gamma,   in.pre_mix, in.sinkhorn_eps, in.num_iters};
  const PreSinglePassForwardOutputs pre_out{out.h_in,       out.h_pre,   out.h_post_next,
                                            out.h_res_next, out.inv_rms, out.h_mix};
  MHC_RETURN_IF_ERROR(
      renamed(pre_single_pass::validate_forward(pre_in, pre_out, options, &problem.pre), MHC_POST_PRE_PRE_NAMES));
  if (in.single_pass == 0) problem.pre.pre.select_first_stream = false;  // V4: its own h_pre
  // Site s's inputs against site s+1's outputs and inputs (each side checked its own).
  NamedList inputs = {{"x", &in.x}, {"h_out", &in.h_out}, {"h_post", &in.h_post}, {"phi", &in.phi},
                      {"alpha", &in.alpha}, {"bias", &in.bias}};
  if (in.h_res) inputs.push_back({"h_res", &*in.h_res});
  if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
  if (in.pre_mix) inputs.push_back({"pre_mix", &*in.pre_mix});
  const NamedList outputs = {{"x_next", &out.x_next},   {"h_in", &out.h_in},         {"h_pre", &out.h_pre},
                             {"h_post_next", &out.h_post_next}, {"h_res_next", &out.h_res_next},
                             {"inv_rms", &out.inv_rms}, {"h_mix", &out.h_mix}};
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
  *p = problem;
  return {};
}

namespace {

// One pass over the streams: the pre's items run the post on their own tokens
// first (pre::forward::TokenPrologue), so x_next is read back from the worker's
// cache, not memory. Only when the post's tensors fit its kernels as they are;
// otherwise the post runs whole first. Either way the chain's bits: every token
// of both operators is computed alone (SPEC §5).
struct Layout {
  bool one_pass;
  int workers;
  int64_t post_scratch_floats;  // per worker (one pass)
  size_t post_scratch_bytes, rest;
};
Layout layout_of(const ForwardProblem& problem, int num_threads) {
  Layout l{post::fits_in_place(problem.post), resolve_threads(num_threads), 0, 0, 0};
  if (l.one_pass) {
    l.post_scratch_floats = post::forward_tokens_scratch_floats(problem.post);
    l.post_scratch_bytes = aligned64(size_t(l.workers * l.post_scratch_floats) * sizeof(float));
    l.rest = pre_single_pass::forward_workspace_bytes(problem.pre, num_threads);
  } else {
    l.rest = std::max(post::forward_workspace_bytes(problem.post, num_threads),
                      pre_single_pass::forward_workspace_bytes(problem.pre, num_threads));
  }
  return l;
}

struct PostTokens {
  const core::PostProblem* post;
  float* scratch;
  int64_t scratch_floats;
  static void run(const void* context, int64_t t0, int64_t t1, int worker) {
    const PostTokens& c = *static_cast<const PostTokens*>(context);
    post::forward_tokens(*c.post, c.scratch + worker * c.scratch_floats, t0, t1);
  }
};

}  // namespace

size_t forward_workspace_bytes(const ForwardProblem& problem, int num_threads) {
  const Layout l = layout_of(problem, num_threads);
  return l.post_scratch_bytes + l.rest;
}

Status run_forward(const ForwardProblem& problem, void* workspace, size_t bytes, int num_threads) {
  const Layout l = layout_of(problem, num_threads);
  if (Status s = workspace_error(l.post_scratch_bytes + l.rest, bytes, workspace); !s.ok()) return s;
  if (!l.one_pass) {
    MHC_RETURN_IF_ERROR(post::run_forward(problem.post, workspace, bytes, num_threads));
    return pre_single_pass::run_forward(problem.pre, workspace, bytes, num_threads);
  }
  char* base = static_cast<char*>(workspace);
  const PostTokens post_tokens{&problem.post, reinterpret_cast<float*>(base), l.post_scratch_floats};
  const pre::forward::TokenPrologue prologue{&PostTokens::run, &post_tokens};
  return pre_single_pass::run_forward(problem.pre, base == nullptr ? nullptr : base + l.post_scratch_bytes, l.rest,
                                      num_threads, &prologue);
}

Status run_forward_in_thread_workspace(const ForwardProblem& problem, int num_threads) {
  return in_thread_workspace(forward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::post_pre
