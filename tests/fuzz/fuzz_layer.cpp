// The layer's fuzz targets (fuzz_layer.hpp): generation, the calls through both
// faces and the operator layer, the oracles (the V4.1 operators' parts in
// fuzz_layer_v41.cpp, the site backward's in fuzz_layer_site.cpp).
#include "fuzz_layer.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "common/described_call.hpp"
#include "fuzz_common.hpp"
#include "kernels/common/token_math.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"
#include "ops/post/post.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc_fuzz {

namespace layer {

std::vector<int64_t> tokens(const LayerProblem& p, std::initializer_list<int64_t> inner) {
  std::vector<int64_t> s = p.bsnd ? std::vector<int64_t>{p.B, p.S} : std::vector<int64_t>{p.T()};
  s.insert(s.end(), inner.begin(), inner.end());
  return s;
}

mhc::TensorView Views::req(const char* name) const {
  const Tensor* t = c.find(name);
  return t->present ? view_of(*t, base) : mhc::TensorView{};
}

std::optional<mhc::TensorView> Views::opt(const char* name) const {
  const Tensor* t = c.find(name);
  if (!t->present) return std::nullopt;
  return view_of(*t, base);
}

Scratch::Scratch(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  data.assign(size_t(std::max<int64_t>(n, 1)), 0.0f);
  view.data = data.data();
  view.dtype = mhc::DType::fp32;
  view.rank = int32_t(shape.size());
  int64_t stride = 1;
  for (int i = view.rank - 1; i >= 0; --i) view.shape[i] = shape[size_t(i)], view.strides[i] = stride, stride *= shape[size_t(i)];
}

mhc::TensorView as_matrices(mhc::TensorView v, int64_t N, int token_dims) {
  if (v.rank != token_dims + 1 || v.rank + 1 > mhc::kMaxRank) return v;
  const int64_t s = v.strides[v.rank - 1];
  v.shape[v.rank - 1] = N;
  v.strides[v.rank - 1] = s * N;
  v.shape[v.rank] = N;
  v.strides[v.rank] = s;
  v.rank += 1;
  return v;
}

}  // namespace layer

namespace {

using layer::as_matrices;
using layer::LayerProblem;
using layer::Scratch;
using layer::tokens;
using layer::Views;
using mhc::TensorView;

std::vector<int64_t> cache_shape(const LayerProblem& p, bool matrix) {
  std::vector<int64_t> s{2 * std::max<int64_t>(p.I, 1)};
  const std::vector<int64_t> t = tokens(p, {});
  s.insert(s.end(), t.begin(), t.end());
  if (matrix) s.push_back(p.N);
  s.push_back(p.pitch);
  return s;
}

LayerProblem generate_problem(Bytes& in, LayerOp op) {
  LayerProblem p;
  p.op = op;
  p.backward = in.flag() && op != LayerOp::rms_norm;
  static const int64_t Ns[] = {4, 1, 2, 3, 5, 8, 6, 7, 13, 4, 4, 16};
  static const int64_t Ds[] = {8, 1, 2, 3, 15, 16, 17, 31, 33, 64, 100, 257, 300, 7, 5, 4};
  static const int64_t Ss[] = {3, 1, 2, 0, 4, 5, 8, 16, 17, 63, 64, 65, 100, 129, 200, 1};
  static const int64_t Bs[] = {1, 2, 3, 0};
  static const int64_t Is[] = {3, 1, 2, 20, 5, 0, -1, 100, int64_t(1) << 40, int64_t(1) << 31, 7, 1};
  p.bsnd = in.flag();
  p.B = p.bsnd ? Bs[in.pick(4)] : 1;
  p.S = Ss[in.pick(16)];
  p.N = Ns[in.pick(12)];
  p.D = Ds[in.pick(16)];
  p.I = Is[in.pick(12)];
  const int64_t wide = 8 * ((p.N + 7) / 8);
  const int64_t pitches[] = {p.N, wide, p.N + 1, wide + 8};
  p.pitch = pitches[in.pick(4)];
  const uint8_t flags = in.u8();
  p.caches = !(flags & 1);
  p.from_z = flags & 2;
  p.h_res = !(flags & 4);
  p.grad_h_res = !(flags & 8);
  p.flat = flags & 16;
  // The single pass: the first site (no pre_mix), gamma, the backward's optional tensors.
  p.pre_mix = !(flags & 1);
  p.gamma = flags & 2;
  p.grad_h_pre = !(flags & 4);
  p.grad_x_post = flags & 8;
  p.grad_pre_mix = p.pre_mix != bool(flags & 32);  // asked for without pre_mix: rejected
  if (op == LayerOp::post_pre || op == LayerOp::site) {
    // The boundary and the site backward: either variant; V4 with a pre_mix (a rejection) now and then.
    const uint8_t more = in.u8();
    p.v41 = more & 1;
    p.h_res = !(more & 2);
    p.grad_h_res = !(more & 4);
    if (!p.v41 && p.pre_mix) p.pre_mix = in.chance(16);
    p.grad_pre_mix = p.pre_mix != bool(flags & 32);
    if (op == LayerOp::site) {
      // grad_x_next given three times in four; grad_pre_mix against pre_mix (a rejection) one in four.
      p.grad_x_post = (more & 24) != 24;
      p.grad_pre_mix = p.pre_mix != ((flags & 96) == 96);
    }
  }
  static const mhc::DType types[] = {mhc::DType::bf16, mhc::DType::fp16, mhc::DType::fp32};
  p.x_dtype = types[in.pick(3)];
  p.grad_x_dtype = in.chance(64) ? MHC_FP32 : int32_t(p.x_dtype);
  if (op == LayerOp::site && !(flags & 128)) p.grad_x_dtype = int32_t(p.x_dtype);  // fp32 grad_x_next: a rejection
  static const double eps[] = {1e-6, 0.0, 1e-3, 0.5, 1e-30, 1e30, -1.0,
                               std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()};
  const size_t e = in.pick(32), h = in.pick(32), n = in.pick(32);
  p.eps = e < 9 ? eps[e] : 1e-6;
  p.hc_eps = h < 9 ? eps[h] : 1e-6;
  p.norm_eps = n < 9 ? eps[n] : 1e-6;
  static const int threads[] = {0, 1, 2, 3, 4, 7, -1, INT_MAX};
  p.threads = threads[in.pick(8)];
  // Mostly the default; else every family the library names (this CPU's or not), or a value naming none.
  static const std::vector<mhc::Isa> isas = [] {
    std::vector<mhc::Isa> v(6, mhc::Isa::automatic);
    for (int i = 0; i < 64; ++i)
      if (mhc::Isa(i) != mhc::Isa::automatic && std::strcmp(mhc::isa_name(mhc::Isa(i)), "unknown") != 0)
        v.push_back(mhc::Isa(i));
    v.push_back(mhc::Isa(42));
    return v;
  }();
  p.isa = isas[in.pick(isas.size())];
  // Keep accepted calls small (the oracle reruns them, serially for the reference).
  const int64_t steps = std::clamp<int64_t>(p.I, 1, 200);
  auto too_big = [&] {
    const int64_t T = p.T(), N = p.N;
    switch (op) {
      case LayerOp::sinkhorn: return T * N * N * steps > (1 << 16) || 2 * steps * T * N * p.pitch > (1 << 17);
      case LayerOp::post: return T * N * p.D > (1 << 14);
      case LayerOp::pre_sinkhorn:
        return T * p.K() > (1 << 13) || p.F() * p.K() > (1 << 14) || T * N * N * steps > (1 << 16) ||
               2 * steps * T * N * p.pitch > (1 << 17);
      case LayerOp::single_pass:
      case LayerOp::post_pre:
      case LayerOp::site:
        return T * p.K() > (1 << 13) || p.F() * p.K() > (1 << 14) || T * N * N * steps > (1 << 16);
      case LayerOp::collapse: return T * N * p.D > (1 << 14);
      case LayerOp::rms_norm: return T * p.D > (1 << 14);
    }
    return false;
  };
  while (too_big() && p.D > 1) p.D = (p.D + 1) / 2;
  while (too_big() && p.S > 1) p.S = (p.S + 1) / 2;
  while (too_big() && p.N > 1) p.N = p.N / 2, p.pitch = std::max<int64_t>(p.N, p.pitch / 2);
  return p;
}

std::vector<Slot> slots_of(const LayerProblem& p) {
  const int32_t f32 = MHC_FP32, xt = int32_t(p.x_dtype);
  const int64_t N = p.N, D = p.D, F = p.F(), K = p.K();
  const std::vector<int64_t> mat = tokens(p, {N, N}), res = p.flat ? tokens(p, {N * N}) : mat;
  switch (p.op) {
    case LayerOp::single_pass:
    case LayerOp::collapse:
    case LayerOp::post_pre:
    case LayerOp::rms_norm: return layer::v41_slots(p);
    case LayerOp::site: return layer::site_slots(p);
    case LayerOp::sinkhorn:
      if (!p.backward)
        return {{"z", false, true, f32, mat, true},
                {"h_res", true, true, f32, mat, true},
                {"norm_out", true, p.caches, f32, cache_shape(p, true), false},
                {"sum_out", true, p.caches, f32, cache_shape(p, false), false}};
      return {{"grad_h_res", false, true, f32, mat, true},
              {"norm_out", false, !p.from_z, f32, cache_shape(p, true), false},
              {"sum_out", false, !p.from_z, f32, cache_shape(p, false), false},
              {"z", false, p.from_z, f32, mat, true},
              {"grad_z", true, true, f32, mat, true}};
    case LayerOp::post:
      if (!p.backward)
        return {{"x", false, true, xt, tokens(p, {N, D}), true},
                {"h_res", false, p.h_res, f32, mat, true},
                {"h_out", false, true, xt, tokens(p, {D}), true},
                {"h_post", false, true, f32, tokens(p, {N}), true},
                {"out", true, true, xt, tokens(p, {N, D}), true}};
      return {{"grad_out", false, true, xt, tokens(p, {N, D}), true},
              {"x", false, true, xt, tokens(p, {N, D}), true},
              {"h_res", false, p.h_res, f32, mat, true},
              {"h_out", false, true, xt, tokens(p, {D}), true},
              {"h_post", false, true, f32, tokens(p, {N}), true},
              {"grad_x", true, true, p.grad_x_dtype, tokens(p, {N, D}), true},
              {"grad_h_res", true, p.grad_h_res, f32, mat, true},
              {"grad_h_out", true, true, xt, tokens(p, {D}), true},
              {"grad_h_post", true, true, f32, tokens(p, {N}), true}};
    case LayerOp::pre_sinkhorn:
      if (!p.backward)
        return {{"x", false, true, xt, tokens(p, {N, D}), true},
                {"phi", false, true, f32, {F, K}, false},
                {"alpha", false, true, f32, {3}, false},
                {"bias", false, true, f32, {F}, false},
                {"h_in", true, true, xt, tokens(p, {D}), true},
                {"h_post", true, true, f32, tokens(p, {N}), true},
                {"h_res", true, true, f32, res, true},
                {"inv_rms", true, p.caches, f32, tokens(p, {}), true},
                {"h_mix", true, p.caches, f32, tokens(p, {F}), true},
                {"h_pre", true, p.caches, f32, tokens(p, {N}), true},
                {"norm_out", true, p.caches, f32, cache_shape(p, true), false},
                {"sum_out", true, p.caches, f32, cache_shape(p, false), false}};
      return {{"grad_h_in", false, true, xt, tokens(p, {D}), true},
              {"grad_h_post", false, true, f32, tokens(p, {N}), true},
              {"grad_h_res", false, true, f32, res, true},
              {"x", false, true, xt, tokens(p, {N, D}), true},
              {"phi", false, true, f32, {F, K}, false},
              {"alpha", false, true, f32, {3}, false},
              {"bias", false, true, f32, {F}, false},
              {"h_pre", false, true, f32, tokens(p, {N}), true},
              {"h_mix", false, true, f32, tokens(p, {F}), true},
              {"inv_rms", false, true, f32, tokens(p, {}), true},
              {"sum_out", false, true, f32, cache_shape(p, false), false},
              {"norm_out", false, true, f32, cache_shape(p, true), false},
              {"grad_x", true, true, xt, tokens(p, {N, D}), true},
              {"grad_phi", true, true, f32, {F, K}, false},
              {"grad_alpha", true, true, f32, {3}, false},
              {"grad_bias", true, true, f32, {F}, false}};
  }
  return {};
}

// ------------------------------------------------------------------ the calls

mhc::Options options_of(const LayerProblem& p) {
  mhc::Options o;
  o.hc_eps = p.hc_eps;
  o.norm_eps = p.norm_eps;
  o.num_threads = p.threads;
  o.isa = p.isa;
  return o;
}

mhc::SinkhornForwardInputs sf_in(const Views& v, const LayerProblem& p) { return {v.req("z"), p.eps, p.I}; }
mhc::SinkhornForwardOutputs sf_out(const Views& v) { return {v.req("h_res"), v.opt("norm_out"), v.opt("sum_out")}; }
mhc::SinkhornBackwardInputs sb_in(const Views& v, const LayerProblem& p) {
  return {v.req("grad_h_res"), v.opt("norm_out"), v.opt("sum_out"), v.opt("z"), p.eps, p.I};
}
mhc::SinkhornBackwardOutputs sb_out(const Views& v) { return {v.req("grad_z")}; }
mhc::PostForwardInputs pf_in(const Views& v) { return {v.req("x"), v.opt("h_res"), v.req("h_out"), v.req("h_post")}; }
mhc::PostForwardOutputs pf_out(const Views& v) { return {v.req("out")}; }
mhc::PostBackwardInputs pb_in(const Views& v) {
  return {v.req("grad_out"), v.req("x"), v.opt("h_res"), v.req("h_out"), v.req("h_post")};
}
mhc::PostBackwardOutputs pb_out(const Views& v) {
  return {v.req("grad_x"), v.opt("grad_h_res"), v.req("grad_h_out"), v.req("grad_h_post")};
}
mhc::PreSinkhornForwardInputs qf_in(const Views& v, const LayerProblem& p) {
  return {v.req("x"), v.req("phi"), v.req("alpha"), v.req("bias"), p.I};
}
mhc::PreSinkhornForwardOutputs qf_out(const Views& v) {
  return {v.req("h_in"),  v.req("h_post"), v.req("h_res"),    v.opt("inv_rms"),
          v.opt("h_mix"), v.opt("h_pre"),  v.opt("norm_out"), v.opt("sum_out")};
}
mhc::PreSinkhornBackwardInputs qb_in(const Views& v) {
  return {v.req("grad_h_in"), v.req("grad_h_post"), v.req("grad_h_res"), v.req("x"),     v.req("phi"),
          v.req("alpha"),     v.req("bias"),        v.req("h_pre"),      v.req("h_mix"), v.req("inv_rms"),
          v.req("sum_out"),   v.req("norm_out")};
}
mhc::PreSinkhornBackwardOutputs qb_out(const Views& v) {
  return {v.req("grad_x"), v.req("grad_phi"), v.req("grad_alpha"), v.req("grad_bias")};
}

mhc::Status call_cpp(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o) {
  const Views v{c, base};
  switch (p.op) {
    case LayerOp::sinkhorn:
      return p.backward ? mhc::sinkhorn_backward(sb_in(v, p), sb_out(v), o) : mhc::sinkhorn_forward(sf_in(v, p), sf_out(v), o);
    case LayerOp::post:
      return p.backward ? mhc::post_backward(pb_in(v), pb_out(v), o) : mhc::post_forward(pf_in(v), pf_out(v), o);
    case LayerOp::pre_sinkhorn:
      return p.backward ? mhc::pre_sinkhorn_backward(qb_in(v), qb_out(v), o)
                        : mhc::pre_sinkhorn_forward(qf_in(v, p), qf_out(v), o);
    case LayerOp::single_pass:
    case LayerOp::collapse:
    case LayerOp::post_pre:
    case LayerOp::rms_norm: return layer::v41_call_cpp(c, p, base, o);
    case LayerOp::site: return layer::site_call_cpp(c, p, base, o);
  }
  return {};
}

// Through the operator layer: validation, and the workspace it would size.
mhc::Status validate(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o, bool size) {
  const Views v{c, base};
  mhc::Status s;
  size_t bytes = 0;
  switch (p.op) {
    case LayerOp::sinkhorn: {
      mhc::core::SinkhornProblem q;
      if (p.backward) {
        s = mhc::ops::sinkhorn::validate_backward(sb_in(v, p), sb_out(v), o, &q);
        if (s.ok() && size) bytes = mhc::ops::sinkhorn::backward_workspace_bytes(q, o.num_threads);
      } else {
        s = mhc::ops::sinkhorn::validate_forward(sf_in(v, p), sf_out(v), o, &q);
        if (s.ok() && size) bytes = mhc::ops::sinkhorn::forward_workspace_bytes(q, o.num_threads);
      }
      break;
    }
    case LayerOp::post: {
      mhc::core::PostProblem q;
      if (p.backward) {
        s = mhc::ops::post::validate_backward(pb_in(v), pb_out(v), o, &q);
        if (s.ok() && size) bytes = mhc::ops::post::backward_workspace_bytes(q, o.num_threads);
      } else {
        s = mhc::ops::post::validate_forward(pf_in(v), pf_out(v), o, &q);
        if (s.ok() && size) bytes = mhc::ops::post::forward_workspace_bytes(q, o.num_threads);
      }
      break;
    }
    case LayerOp::pre_sinkhorn:
      if (p.backward) {
        mhc::ops::pre_sinkhorn::BackwardProblem q;
        s = mhc::ops::pre_sinkhorn::validate_backward(qb_in(v), qb_out(v), o, &q);
        if (s.ok() && size) bytes = mhc::ops::pre_sinkhorn::backward_workspace_bytes(q, o.num_threads);
      } else {
        mhc::ops::pre_sinkhorn::ForwardProblem q;
        s = mhc::ops::pre_sinkhorn::validate_forward(qf_in(v, p), qf_out(v), o, &q);
        if (s.ok() && size) bytes = mhc::ops::pre_sinkhorn::forward_workspace_bytes(q, o.num_threads);
      }
      break;
    case LayerOp::single_pass:
    case LayerOp::collapse:
    case LayerOp::post_pre:
    case LayerOp::rms_norm: return layer::v41_validate(c, p, base, o, size);
    case LayerOp::site: return layer::site_validate(c, p, base, o, size);
  }
  (void)bytes;
  return s;
}

mhc_tensor c_of(const TensorView& v) {
  mhc_tensor t{};
  t.data = v.data;
  t.dtype = int32_t(v.dtype);
  t.rank = v.rank;
  for (int i = 0; i < MHC_MAX_RANK; ++i) t.shape[i] = v.shape[i], t.strides[i] = v.strides[i];
  return t;
}

// The C face: every argument NULL where the case has none.
int call_c(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o, bool* required_null) {
  std::vector<mhc_tensor> storage(c.tensors.size());
  std::vector<const mhc_tensor*> ptr(c.tensors.size(), nullptr);
  for (size_t i = 0; i < c.tensors.size(); ++i)
    if (c.tensors[i].present) storage[i] = c_of(view_of(c.tensors[i], base)), ptr[i] = &storage[i];
  auto at = [&](const char* name) {
    for (size_t i = 0; i < c.tensors.size(); ++i)
      if (std::strcmp(c.tensors[i].name, name) == 0) return ptr[i];
    return static_cast<const mhc_tensor*>(nullptr);
  };
  mhc_options opt = mhc_default_options();
  opt.norm_eps = o.norm_eps, opt.hc_eps = o.hc_eps, opt.num_threads = o.num_threads, opt.isa = int32_t(o.isa);
  static const char* const kOperators[] = {"sinkhorn_forward",        "sinkhorn_backward",
                                           "post_forward",            "post_backward",
                                           "pre_sinkhorn_forward",    "pre_sinkhorn_backward",
                                           "pre_single_pass_forward", "pre_single_pass_backward",
                                           "collapse_forward",        "collapse_backward",
                                           "post_pre_forward",        "post_pre_backward",
                                           "rms_norm_forward",        "rms_norm_forward",
                                           "site_backward_prepare",   "site_backward_finish"};
  return mhc_test::call_described(
      kOperators[size_t(int(p.op) * 2 + p.backward)], at, [&](const char*) { return p.eps; },  // eps, sinkhorn_eps
      [&](const char* name) { return std::strcmp(name, "single_pass") == 0 ? int64_t(p.v41) : p.I; }, &opt,
      required_null);
}

bool all_inside(Case& c, const Arena& arena) {
  for (const Tensor& t : c.tensors) {
    if (!t.present || t.null_data || t.rank < 0 || t.rank > MHC_MAX_RANK) continue;
    if (element_size_of(t.dtype) == 0) continue;
    if (!view_inside(arena.base, arena.bytes, arena.base + t.byte_offset, t.dtype, t.rank, t.shape, t.strides))
      return false;
  }
  return true;
}

// ------------------------------------------------------------------ the oracles

void check(bool ok, const LayerProblem& p, const std::string& what) {
  if (!ok) fail(std::string(p.name()) + ": " + what);
}

// The unfused chain of SPEC §12 on `copy` (same family and options): writes the
// fused call's outputs there as the separate operators give them.
void unfused_chain(Case& c, const LayerProblem& p, uint8_t* copy, const mhc::Options& o) {
  const Views v{c, copy};
  const TensorView x = v.req("x");
  const bool bsnd = x.rank == 4;
  const int token_dims = bsnd ? 2 : 1;
  LayerProblem q = p;  // the validated dims, from x
  q.bsnd = bsnd;
  q.B = bsnd ? x.shape[0] : 1;
  q.S = bsnd ? x.shape[1] : x.shape[0];
  q.N = x.shape[x.rank - 2];
  q.D = x.shape[x.rank - 1];
  const int64_t T = q.T(), N = q.N;
  if (!p.backward) {
    const mhc::PreSinkhornForwardOutputs out = qf_out(v);
    Scratch z(tokens(q, {N, N}));
    const mhc::PreForwardOutputs pout{out.h_in, out.h_post, z.view, out.inv_rms, out.h_mix, out.h_pre};
    mhc::Status s = mhc::pre_forward({x, v.req("phi"), v.req("alpha"), v.req("bias"), std::nullopt}, pout, o);
    check(s.ok(), p, "the unfused pre_forward failed where the fused pair ran: " + s.message());
    s = mhc::sinkhorn_forward({z.view, o.hc_eps, p.I}, {as_matrices(out.h_res, N, token_dims), out.norm_out, out.sum_out}, o);
    check(s.ok(), p, "the unfused sinkhorn_forward failed where the fused pair ran: " + s.message());
    return;
  }
  const mhc::PreSinkhornBackwardInputs in = qb_in(v);
  const mhc::PreSinkhornBackwardOutputs out = qb_out(v);
  Scratch grad_z(tokens(q, {N, N})), h_post(tokens(q, {N}));
  mhc::SinkhornBackwardInputs sin;
  sin.grad_h_res = as_matrices(in.grad_h_res, N, token_dims);
  sin.norm_out = in.norm_out;
  sin.sum_out = in.sum_out;
  mhc::Status s = mhc::sinkhorn_backward(sin, {grad_z.view}, o);
  check(s.ok(), p, "the unfused sinkhorn_backward failed where the fused pair ran: " + s.message());
  // h_post as the forward forms it (SPEC §2), from the caches: 2 σ(α_post (r m) + b).
  mhc::ops::pre_sinkhorn::BackwardProblem bp;
  s = mhc::ops::pre_sinkhorn::validate_backward(in, out, o, &bp);
  check(s.ok(), p, "revalidation failed: " + s.message());
  const float alpha_post = bp.pre.alpha.load(bp.pre.alpha.at(0, 1));
  for (int64_t t = 0; t < T; ++t) {
    const float r = bp.pre.inv_rms.load(bp.pre.inv_rms.token_offset(t));
    for (int64_t n = 0; n < N; ++n) {
      const float m = bp.pre.h_mix.load(bp.pre.h_mix.at(t, 0, N + n));
      const float z_post = alpha_post * (r * m) + bp.bias.load(bp.bias.at(0, N + n));
      h_post.data[size_t(t * N + n)] = 2.0f * mhc::kernels::common::sigmoid(z_post);
    }
  }
  const mhc::PreBackwardInputs bin{in.x,       in.phi,   in.alpha, in.grad_h_in, in.grad_h_post, grad_z.view,
                                   in.inv_rms, in.h_mix, in.h_pre, h_post.view,  std::nullopt,   std::nullopt};
  s = mhc::pre_backward(bin, {out.grad_x, out.grad_phi, out.grad_alpha, out.grad_bias, std::nullopt}, o);
  check(s.ok(), p, "the unfused pre_backward failed where the fused pair ran: " + s.message());
}

bool is_nan_element(const uint8_t* at, int32_t dtype) {
  return std::isnan(mhc::core::load_element(at, mhc::DType(dtype), 0));
}

// The output elements of `got` and `want` (two arenas) agree: the same bits, or
// both NaN (which NaN an instruction returns is the compiler's choice).
void compare_outputs(Case& c, const LayerProblem& p, const uint8_t* got, const uint8_t* want, const Arena& arena,
                     const char* what) {
  for (const Tensor& t : c.tensors) {
    if (!t.output || !t.present) continue;
    const TensorView v = view_of(t, arena.base);
    const int64_t esize = element_size_of(t.dtype);
    int64_t numel = 1;
    for (int i = 0; i < v.rank; ++i) numel *= v.shape[i];
    for (int64_t linear = 0; linear < numel; ++linear) {
      int64_t rest = linear, offset = 0;
      for (int i = v.rank - 1; i >= 0; --i) offset += (rest % v.shape[i]) * v.strides[i], rest /= v.shape[i];
      const int64_t at = t.byte_offset + offset * esize;
      if (std::memcmp(got + at, want + at, size_t(esize)) == 0) continue;
      if (is_nan_element(got + at, t.dtype) && is_nan_element(want + at, t.dtype)) continue;
      fail(std::string(p.name()) + ": " + t.name + " element " + std::to_string(linear) + " differs from " + what +
           ": " + std::to_string(mhc::core::load_element(got + at, mhc::DType(t.dtype), 0)) + " vs " +
           std::to_string(mhc::core::load_element(want + at, mhc::DType(t.dtype), 0)));
    }
  }
}

bool resolves_to_reference(const mhc::Options& o) {
  return o.isa == mhc::Isa::reference || (o.isa == mhc::Isa::automatic && std::strcmp(mhc::isa(), "reference") == 0);
}

void check_accepted(Case& c, const LayerProblem& p, const Arena& arena, const mhc::Options& o, bool rerun) {
  check_only_outputs_written(c, arena, arena.base, p.name());
  std::vector<uint8_t> copy(arena.pristine);
  if (p.op == LayerOp::pre_sinkhorn) {
    if (!resolves_to_reference(o)) {
      unfused_chain(c, p, copy.data(), o);
      compare_outputs(c, p, arena.base, copy.data(), arena, "the unfused chain's");
    }
  } else if (p.op == LayerOp::single_pass) {
    if (!resolves_to_reference(o)) layer::v41_check_first_site(c, p, arena.base, o);
  } else if (p.op == LayerOp::post_pre) {
    if (!p.backward) {
      layer::v41_unfused_boundary(c, p, copy.data(), o);
      compare_outputs(c, p, arena.base, copy.data(), arena, "the unfused chain's");
    }
  } else if (p.op == LayerOp::site) {  // prepare and finish, either variant, on every family
    layer::site_unfused(c, p, copy.data(), o);
    compare_outputs(c, p, arena.base, copy.data(), arena, "the unfused chain's");
  } else {  // MhcSinkhorn, MhcPost, MhcCollapse, MhcRmsNorm: every family gives the reference family's bits
    mhc::Options ref = o;
    ref.isa = mhc::Isa::reference;
    ref.num_threads = 1;
    const mhc::Status s = call_cpp(c, p, copy.data(), ref);
    check(s.ok(), p, "the reference family failed where another ran: " + s.message());
    compare_outputs(c, p, arena.base, copy.data(), arena, "the reference family's");
  }
  if (rerun) {
    std::vector<uint8_t> shifted(arena.bytes + 64 + 48);
    uint8_t* sb = shifted.data() + 16;
    while ((reinterpret_cast<uintptr_t>(sb) - reinterpret_cast<uintptr_t>(arena.base)) % 64 == 0) sb += 16;
    std::memcpy(sb, arena.pristine.data(), arena.bytes);
    mhc::Options again = o;
    again.num_threads = p.threads == 1 ? 3 : 1;
    const mhc::Status s = call_cpp(c, p, sb, again);
    check(s.ok(), p, "the rerun failed: " + s.message());
    for (size_t i = 0; i < arena.bytes; ++i)
      if (sb[i] != arena.base[i])
        fail(std::string(p.name()) + ": a rerun with num_threads=" + std::to_string(again.num_threads) +
             " at another address differs at arena byte " + std::to_string(i));
  }
}

}  // namespace

void run_layer_target(const uint8_t* data, size_t size, LayerOp op) {
  Bytes in(data, size);
  const LayerProblem p = generate_problem(in, op);
  Case c;
  c.problem.op = p.backward ? Op::backward : Op::forward;
  c.problem.bsnd = p.bsnd;
  c.problem.B = p.B, c.problem.S = p.S, c.problem.N = p.N, c.problem.D = p.D;
  c.problem.x_dtype = p.x_dtype;
  c.problem.norm_eps = p.norm_eps, c.problem.hc_eps = p.hc_eps, c.problem.threads = p.threads;
  lay_out(in, c, slots_of(p), p.bsnd);
  describe(c);
  describe_more(std::string(p.name()) + ": eps " + std::to_string(p.eps) + ", num_iters " + std::to_string(p.I) +
                ", isa " + std::to_string(int(p.isa)));
  const bool via_c = in.chance(64);
  const bool rerun = !in.chance(96);
  Arena arena(c);
  const mhc::Options o = options_of(p);

  const mhc::Status validated = validate(c, p, arena.base, o, false);
  MHC_FUZZ_CHECK(arena.unchanged(), std::string(p.name()) + ": validation wrote to the arena");
  if (!validated.ok()) {
    MHC_FUZZ_CHECK(!validated.message().empty(), std::string(p.name()) + ": a rejection without a message");
    MHC_FUZZ_CHECK(validated.code() == mhc::StatusCode::null_pointer || validated.code() == mhc::StatusCode::invalid_argument,
                   std::string(p.name()) + ": unexpected code: " + validated.message());
  }
  if (validated.ok() && !all_inside(c, arena)) {
    (void)validate(c, p, arena.base, o, true);  // sizing must be safe; the call is not made
    return;
  }
  if (via_c) {
    bool required_null = false;
    const int code = call_c(c, p, arena.base, o, &required_null);
    if (required_null) {
      MHC_FUZZ_CHECK(code == MHC_ERR_NULLPTR, std::string(p.name()) + ": C face: a NULL required tensor was not reported");
      MHC_FUZZ_CHECK(std::string(mhc_last_error()).find("required, got NULL") != std::string::npos,
                     std::string("C face message: ") + mhc_last_error());
      MHC_FUZZ_CHECK(arena.unchanged(), std::string(p.name()) + ": C face: a NULL-argument error wrote to the arena");
      return;
    }
    if (!validated.ok()) {
      MHC_FUZZ_CHECK(code == int(validated.code()), std::string(p.name()) + ": C face code differs from validation's");
      MHC_FUZZ_CHECK(mhc_last_error() == validated.message(), std::string(p.name()) + ": C face message differs: " +
                                                                  mhc_last_error() + " / " + validated.message());
      MHC_FUZZ_CHECK(mhc_last_error_kind() == int(validated.kind()), std::string(p.name()) + ": C face kind differs");
      MHC_FUZZ_CHECK(arena.unchanged(), std::string(p.name()) + ": C face: a rejected call wrote to the arena");
      return;
    }
    if (code != MHC_OK) fail(std::string(p.name()) + ": C face: a validated call failed: " + mhc_last_error());
  } else {
    const mhc::Status s = call_cpp(c, p, arena.base, o);
    if (!validated.ok()) {
      MHC_FUZZ_CHECK(s.code() == validated.code() && s.kind() == validated.kind() && s.message() == validated.message(),
                     std::string(p.name()) + ": C++ face status differs from validation's: " + s.message() + " / " +
                         validated.message());
      MHC_FUZZ_CHECK(arena.unchanged(), std::string(p.name()) + ": C++ face: a rejected call wrote to the arena");
      return;
    }
    if (!s.ok()) fail(std::string(p.name()) + ": C++ face: a validated call failed: " + s.message());
  }
  check_accepted(c, p, arena, o, rerun);
}

}  // namespace mhc_fuzz
