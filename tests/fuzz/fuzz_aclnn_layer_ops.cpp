// The aclnn layer targets' operators (fuzz_aclnn_layer.hpp): generation of a
// call (CANN's shapes and scalars), GetWorkspaceSize, and the same call through
// the C++ API. The face's rules are in fuzz_aclnn_layer_rules.cpp.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_post.h"
#include "aclnnop/aclnn_mhc_post_backward.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "fuzz_aclnn_layer.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc_fuzz {
namespace aclnn_layer {
namespace {

using Op = AclLayerOp;
using mhc::TensorView;
using Dims = std::vector<int64_t>;

struct Sizes {
  bool bsnd = false;
  int64_t B = 1, S = 3, N = 4, D = 8;
  int64_t T() const { return B * S; }
  int64_t pitch() const { return (N + 7) / 8 * 8; }  // Na
  int64_t F() const { return 2 * N + N * N; }
  Dims tokens(Dims inner) const {
    Dims s = bsnd ? Dims{B, S} : Dims{T()};
    s.insert(s.end(), inner.begin(), inner.end());
    return s;
  }
  Dims steps(int64_t steps, Dims inner) const {  // [2I, <token dims>, inner...]
    Dims s = tokens(inner);
    s.insert(s.begin(), steps);
    return s;
  }
};

// A cache of `steps`·T·prod(inner) elements in one of the shapes that hold them.
Dims cache_shape(const Sizes& z, int64_t steps, const Dims& inner, int variant) {
  const int64_t in = count_of(inner), T = z.T();
  switch (variant) {
    case 0: return z.steps(steps, inner);
    case 1: return {steps * T * in};
    case 2: return {steps * T, in};
    case 3: return {steps, T * in};
    default: return {2, steps / 2, T, in};
  }
}

double pick_eps(Bytes& in) {
  static const double eps[] = {1e-6, 0.0, 1e-3, 0.5, 1e-30, 1e30, -1.0,
                               std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()};
  const size_t e = in.pick(32);
  return e < 9 ? eps[e] : 1e-6;
}
bool cpp_eps(double e) { return std::isfinite(e) && e >= 0; }  // the C++ API's rule (the face checks none)

const char* op_name(Op op) { return kRunNames[run_index(op)]; }

}  // namespace

// ------------------------------------------------------------------ generation

LayerCall generate_call(Bytes& in, Op op) {
  LayerCall call;
  call.op = op;
  Sizes z;
  static const int64_t Ns[] = {4, 1, 2, 3, 5, 8, 6, 7, 13, 4, 4, 16};
  static const int64_t Ds[] = {8, 1, 2, 3, 15, 16, 17, 31, 33, 64, 100, 257, 300, 7, 5, 4};
  static const int64_t Ss[] = {3, 1, 2, 0, 4, 5, 8, 16, 17, 63, 64, 65, 100, 129, 200, 1};
  static const int64_t Bs[] = {1, 2, 3, 0};
  z.bsnd = in.flag();
  z.B = z.bsnd ? Bs[in.pick(4)] : 1;
  z.S = Ss[in.pick(16)];
  z.N = Ns[in.pick(12)];
  z.D = Ds[in.pick(16)];
  static const int64_t iters[] = {3, 1, 2, 5, 20, 100, 7, 4, 0, -1, 101, int64_t(1) << 31, int64_t(1) << 40,
                                  INT64_MAX, INT64_MIN, 1};
  const bool backward = op == Op::sinkhorn_backward || op == Op::post_backward || op == Op::pre_sinkhorn_backward;
  call.num_iters = iters[in.pick(backward ? 8 : 16)];
  const bool iters_ok = call.num_iters >= 1 && call.num_iters <= 100;
  int64_t I = iters_ok ? call.num_iters : 2;  // a wrong numIters is rejected whatever the caches are
  const bool sinkhorn = op == Op::sinkhorn || op == Op::sinkhorn_backward;
  static const mhc::DType xs[] = {mhc::DType::bf16, mhc::DType::fp16};
  mhc::DType x_dtype = sinkhorn ? mhc::DType::fp32 : xs[in.pick(2)];
  const bool wrong_dtype = in.chance(16);  // fp32 x where bf16/fp16 is asked, bf16 where fp32
  if (wrong_dtype) x_dtype = sinkhorn ? mhc::DType::bf16 : mhc::DType::fp32;
  call.eps = float(pick_eps(in));
  call.hc_eps = pick_eps(in);
  call.norm_eps = pick_eps(in);
  static const int64_t bad_mult[] = {0, 0, 0, -1, INT64_MAX, int64_t(1) << 40};  // 0, 1: N + 1, N - 1
  const bool wrong_mult = in.chance(24);
  const size_t mult = in.pick(6);
  call.need_backward = in.u8() < 192;
  const uint8_t flags = in.u8();
  const int form = int(in.pick(16));
  const int variant = int(in.pick(5));

  // Keep accepted calls small (each runs twice).
  auto too_big = [&] {
    const int64_t T = z.T(), N = z.N, steps = 2 * I;
    switch (op) {
      case Op::sinkhorn: case Op::sinkhorn_backward:
        return T * N * N * I > (1 << 16) || steps * T * N * z.pitch() > (1 << 17);
      case Op::post: case Op::post_backward: return T * N * z.D > (1 << 14);
      default:
        return T * N * z.D > (1 << 13) || z.F() * N * z.D > (1 << 14) || T * N * N * I > (1 << 16) ||
               steps * T * N * z.pitch() > (1 << 17);
    }
  };
  while (too_big() && z.D > 1 && !sinkhorn) z.D = (z.D + 1) / 2;
  while (too_big() && z.S > 1) z.S = (z.S + 1) / 2;
  while (too_big() && z.N > 1) z.N /= 2;
  while (too_big() && I > 1) I = (I + 1) / 2;
  if (iters_ok && !backward) call.num_iters = I;
  call.hc_mult = !wrong_mult ? z.N : mult == 0 ? z.N + 1 : mult == 1 ? z.N - 1 : bad_mult[mult];

  const int32_t f32 = MHC_FP32, xt = int32_t(x_dtype);
  const int64_t N = z.N, D = z.D, F = z.F(), K = N * D, Na = z.pitch(), steps = 2 * I;
  const Dims mat = z.tokens({N, N}), res = flags & 4 ? z.tokens({N * N}) : mat;
  bool valid = !wrong_dtype;
  std::vector<Slot> slots;
  char plan[160] = "";
  switch (op) {
    case Op::sinkhorn:
    case Op::sinkhorn_backward: {
      // The caches: 0-7 right, in five shapes (the backward's 4-7 for I + 1
      // iterations); then placeholders (NULL, one element), one real and one
      // placeholder, a count for another I, the pitch N, CANN's documented
      // [2I,N,N,T], a count off by one.
      const bool fwd = op == Op::sinkhorn;
      bool norm = true, sum = true;
      Dims norm_shape = cache_shape(z, steps, {N, Na}, variant), sum_shape = cache_shape(z, steps, {Na}, variant);
      static const Dims units[] = {{1}, {1, 1}, {}};
      const Dims& unit = units[variant % 3];
      bool caches_valid = true;
      switch (form) {
        case 8:  // NULL: no caches (forward); the backward needs both
          if (fwd) norm = sum = false;
          else (flags & 1 ? norm : sum) = false, caches_valid = false;
          break;
        case 9: norm_shape = sum_shape = unit, caches_valid = fwd; break;  // one element each: none
        case 10:  // one NULL, one of one element: none
          (flags & 1 ? norm : sum) = false, (flags & 1 ? sum_shape : norm_shape) = unit, caches_valid = fwd;
          break;
        case 11: (flags & 1 ? norm_shape : sum_shape) = unit, caches_valid = false; break;  // one real cache
        case 12: norm_shape = cache_shape(z, steps + 2, {N, Na}, variant), caches_valid = false; break;
        case 13:  // the pitch N: the count of Na when N is a multiple of 8
          norm_shape = cache_shape(z, steps, {N, N}, variant), sum_shape = cache_shape(z, steps, {N}, variant);
          caches_valid = N % 8 == 0;
          break;
        case 14: norm_shape = {steps, N, N, z.T()}, caches_valid = N % 8 == 0; break;  // CANN's documented shape
        case 15: {  // a count off by one
          Dims& shape = flags & 1 ? norm_shape : sum_shape;
          shape = {count_of(shape) + (flags & 2 ? 1 : -1)};
          caches_valid = false;
          break;
        }
        default: break;
      }
      valid = valid && caches_valid;
      if (!fwd && form >= 4 && form < 8)  // any I: the backward takes it from the counts
        norm_shape = cache_shape(z, steps + 2, {N, Na}, variant), sum_shape = cache_shape(z, steps + 2, {Na}, variant);
      if (fwd)
        slots = {{"x", false, true, xt, mat, true},
                 {"output", true, true, f32, mat, true},
                 {"normOut", true, norm, f32, norm_shape, false},
                 {"sumOut", true, sum, f32, sum_shape, false}};
      else
        slots = {{"gradOutput", false, true, xt, mat, true},
                 {"normOut", false, norm, f32, norm_shape, false},
                 {"sumOut", false, sum, f32, sum_shape, false},
                 {"out", true, true, f32, mat, true}};
      if (fwd) valid = valid && iters_ok;
      std::snprintf(plan, sizeof plan, "%s eps=%g numIters=%lld cache form %d shape %d", op_name(op), double(call.eps),
                    (long long)call.num_iters, form, variant);
      break;
    }
    case Op::post:
    case Op::post_backward: {
      const bool h_res = !(flags & 1 && flags & 2);
      const bool grad_h_res = !(form == 15 && flags & 8);
      const int32_t grad_x = form == 14 ? f32 : xt;
      if (op == Op::post)
        slots = {{"x", false, true, xt, z.tokens({N, D}), true},
                 {"hRes", false, h_res, f32, mat, true},
                 {"hOut", false, true, xt, z.tokens({D}), true},
                 {"hPost", false, true, f32, z.tokens({N}), true},
                 {"out", true, true, xt, z.tokens({N, D}), true}};
      else
        slots = {{"gradOutput", false, true, xt, z.tokens({N, D}), true},
                 {"x", false, true, xt, z.tokens({N, D}), true},
                 {"hRes", false, h_res, f32, mat, true},
                 {"hOut", false, true, xt, z.tokens({D}), true},
                 {"hPost", false, true, f32, z.tokens({N}), true},
                 {"gradX", true, true, grad_x, z.tokens({N, D}), true},
                 {"gradHRes", true, grad_h_res, f32, mat, true},
                 {"gradHOut", true, true, xt, z.tokens({D}), true},
                 {"gradHPost", true, true, f32, z.tokens({N}), true}};
      if (op == Op::post_backward) valid = valid && grad_h_res && grad_x == xt;
      std::snprintf(plan, sizeof plan, "%s hRes %s", op_name(op), h_res ? "given" : "NULL");
      break;
    }
    case Op::pre_sinkhorn:
    case Op::pre_sinkhorn_backward: {
      // The caches: right (0-9, 15), one NULL, sumOut for I+1, an odd 2I,
      // CANN's invRms without its unit dim, normOut with the pitch Na.
      const bool fwd = op == Op::pre_sinkhorn;
      Dims sum = z.steps(steps, {N}), norm = z.steps(steps, {N, N}), inv_rms = z.tokens({1});
      bool caches_valid = true;
      switch (form) {
        case 11: sum = z.steps(steps + 2, {N}), caches_valid = false; break;
        case 12: sum = z.steps(steps + 1, {N}), norm = z.steps(steps + 1, {N, N}), caches_valid = false; break;
        case 13: inv_rms = z.tokens({}), caches_valid = false; break;
        case 14: norm = z.steps(steps, {N, Na}), caches_valid = Na == N; break;
        default: break;
      }
      const bool caches = !fwd || call.need_backward || flags & 16;  // without needBackward: anything
      if (fwd)
        slots = {{"x", false, true, xt, z.tokens({N, D}), true},
                 {"phi", false, true, f32, {F, K}, false},
                 {"alpha", false, true, f32, {3}, false},
                 {"bias", false, true, f32, {F}, false},
                 {"hIn", true, true, xt, z.tokens({D}), true},
                 {"hPost", true, true, f32, z.tokens({N}), true},
                 {"hRes", true, true, f32, res, true},
                 {"hPre", true, caches, f32, z.tokens({N}), true},
                 {"hcBeforeNorm", true, caches, f32, z.tokens({F}), true},
                 {"invRms", true, caches, f32, inv_rms, true},
                 {"sumOut", true, caches, f32, sum, false},
                 {"normOut", true, caches, f32, norm, false}};
      else
        slots = {{"gradHin", false, true, xt, z.tokens({D}), true},
                 {"gradHPost", false, true, f32, z.tokens({N}), true},
                 {"gradHRes", false, true, f32, res, true},
                 {"x", false, true, xt, z.tokens({N, D}), true},
                 {"phi", false, true, f32, {F, K}, false},
                 {"alpha", false, true, f32, {3}, false},
                 {"bias", false, true, f32, {F}, false},
                 {"hPre", false, true, f32, z.tokens({N}), true},
                 {"hcBeforeNorm", false, true, f32, z.tokens({F}), true},
                 {"invRms", false, true, f32, inv_rms, true},
                 {"sumOut", false, true, f32, sum, false},
                 {"normOut", false, true, f32, norm, false},
                 {"gradX", true, true, xt, z.tokens({N, D}), true},
                 {"gradPhi", true, true, f32, {F, K}, false},
                 {"gradAlpha", true, true, f32, {3}, false},
                 {"gradBias", true, true, f32, {F}, false}};
      if (form == 10) {  // one tensor NULL: a cache of the forward, any of the backward's
        const size_t i = fwd ? 7 + in.pick(5) : in.pick(slots.size());
        slots[i].present = false;
        caches_valid = false;
      }
      if (fwd) {
        // Without needBackward the caches are not looked at.
        valid = valid && (caches_valid || !call.need_backward) && iters_ok && !wrong_mult;
        std::snprintf(plan, sizeof plan, "%s hcMult=%lld numIters=%lld hcEps=%g normEps=%g needBackward=%d form %d",
                      op_name(op), (long long)call.hc_mult, (long long)call.num_iters, call.hc_eps, call.norm_eps,
                      int(call.need_backward), form);
      } else {
        valid = valid && caches_valid;
        std::snprintf(plan, sizeof plan, "%s hcEps=%g cache iterations %lld form %d", op_name(op), call.hc_eps,
                      (long long)I, form);
      }
      break;
    }
  }
  call.plan_valid = valid;
  call.plan = plan;
  Problem& p = call.c.problem;
  p.op = backward ? mhc_fuzz::Op::backward : mhc_fuzz::Op::forward;
  p.bsnd = z.bsnd, p.B = z.B, p.S = z.S, p.N = z.N, p.D = z.D, p.x_dtype = x_dtype;
  p.hc_eps = call.hc_eps, p.norm_eps = call.norm_eps, p.threads = 0;
  lay_out(in, call.c, slots, z.bsnd, true, &call.mutations);
  call.cache.assign(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i)
    call.cache[i] = std::string(slots[i].name) == "normOut" || std::string(slots[i].name) == "sumOut";
  return call;
}

// ------------------------------------------------------------------ phase 1

aclnnStatus get_workspace(const LayerCall& call, const AclTensors& tensors, uint64_t* ws, aclOpExecutor** ex) {
  auto h = [&](const char* name) { return tensors.handles[size_t(call.index(name))]; };
  switch (call.op) {
    case Op::sinkhorn:
      return aclnnMhcSinkhornGetWorkspaceSize(h("x"), call.eps, call.num_iters, h("output"), h("normOut"),
                                              h("sumOut"), ws, ex);
    case Op::sinkhorn_backward:
      return aclnnMhcSinkhornBackwardGetWorkspaceSize(h("gradOutput"), h("normOut"), h("sumOut"), h("out"), ws, ex);
    case Op::post:
      return aclnnMhcPostGetWorkspaceSize(h("x"), h("hRes"), h("hOut"), h("hPost"), h("out"), ws, ex);
    case Op::post_backward:
      return aclnnMhcPostBackwardGetWorkspaceSize(h("gradOutput"), h("x"), h("hRes"), h("hOut"), h("hPost"),
                                                  h("gradX"), h("gradHRes"), h("gradHOut"), h("gradHPost"), ws, ex);
    case Op::pre_sinkhorn:
      return aclnnMhcPreSinkhornGetWorkspaceSize(
          h("x"), h("phi"), h("alpha"), h("bias"), call.hc_mult, call.num_iters, call.hc_eps, call.norm_eps,
          call.need_backward, h("hIn"), h("hPost"), h("hRes"), h("hPre"), h("hcBeforeNorm"), h("invRms"),
          h("sumOut"), h("normOut"), ws, ex);
    case Op::pre_sinkhorn_backward:
      return aclnnMhcPreSinkhornBackwardGetWorkspaceSize(
          h("gradHin"), h("gradHPost"), h("gradHRes"), h("x"), h("phi"), h("alpha"), h("bias"), h("hPre"),
          h("hcBeforeNorm"), h("invRms"), h("sumOut"), h("normOut"), call.hc_eps, h("gradX"), h("gradPhi"),
          h("gradAlpha"), h("gradBias"), ws, ex);
  }
  return ACLNN_ERR_INNER;
}

// ------------------------------------------------------------------ the C++ API

namespace {

// A cache as the core takes it: the contiguous view `dims` of the tensor's memory.
TensorView cache_view(const Tensor& t, uint8_t* base, const Dims& dims) {
  TensorView v;
  v.data = base + t.byte_offset;
  v.dtype = mhc::DType::fp32;
  v.rank = int32_t(dims.size());
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) v.shape[i] = dims[size_t(i)], v.strides[i] = stride, stride *= dims[size_t(i)];
  return v;
}

Dims sinkhorn_cache(const Dims& x, int64_t iterations, bool matrix) {
  const int64_t N = x.back(), Na = pitch_of(N);
  Dims d(x.begin(), x.end() - 2);
  d.insert(d.begin(), 2 * iterations);
  if (matrix) d.push_back(N);
  d.push_back(Na);
  return d;
}

}  // namespace

void run_cpp(const LayerCall& call, uint8_t* copy) {
  auto v = [&](const char* name) { return view_of(call.at(name), copy); };
  auto opt = [&](const char* name) -> std::optional<TensorView> {
    if (!call.at(name).present) return std::nullopt;
    return v(name);
  };
  mhc::Options o;
  o.num_threads = call.threads;
  mhc::Status s;
  namespace sk = mhc::ops::sinkhorn;
  namespace ps = mhc::ops::pre_sinkhorn;
  switch (call.op) {
    case Op::sinkhorn: {
      const mhc::SinkhornForwardInputs in{v("x"), double(call.eps), call.num_iters};
      mhc::SinkhornForwardOutputs out{v("output"), std::nullopt, std::nullopt};
      const Dims x = dims_of(call.at("x"));
      if (call.at("normOut").present && count_of(dims_of(call.at("normOut"))) != 1) {
        out.norm_out = cache_view(call.at("normOut"), copy, sinkhorn_cache(x, call.num_iters, true));
        out.sum_out = cache_view(call.at("sumOut"), copy, sinkhorn_cache(x, call.num_iters, false));
      }
      mhc::core::SinkhornProblem p;
      if (cpp_eps(call.eps)) s = mhc::sinkhorn_forward(in, out, o);
      else if ((s = sk::validate_forward(in, out, o, &p, {.eps_values = false})).ok())
        s = sk::run_forward_in_thread_workspace(p, o.num_threads);
      break;
    }
    case Op::sinkhorn_backward: {
      const Dims g = dims_of(call.at("gradOutput"));
      const int64_t I = count_of(dims_of(call.at("normOut"))) / count_of(sinkhorn_cache(g, 1, true));
      mhc::SinkhornBackwardInputs in;
      in.grad_h_res = v("gradOutput");
      in.norm_out = cache_view(call.at("normOut"), copy, sinkhorn_cache(g, I, true));
      in.sum_out = cache_view(call.at("sumOut"), copy, sinkhorn_cache(g, I, false));
      s = mhc::sinkhorn_backward(in, {v("out")}, o);
      break;
    }
    case Op::post:
      s = mhc::post_forward({v("x"), opt("hRes"), v("hOut"), v("hPost")}, {v("out")}, o);
      break;
    case Op::post_backward:
      s = mhc::post_backward({v("gradOutput"), v("x"), opt("hRes"), v("hOut"), v("hPost")},
                             {v("gradX"), v("gradHRes"), v("gradHOut"), v("gradHPost")}, o);
      break;
    case Op::pre_sinkhorn: {
      const mhc::PreSinkhornForwardInputs in{v("x"), v("phi"), v("alpha"), v("bias"), call.num_iters};
      mhc::PreSinkhornForwardOutputs out;
      out.h_in = v("hIn"), out.h_post = v("hPost"), out.h_res = v("hRes");
      if (call.need_backward) {
        out.inv_rms = v("invRms"), out.h_mix = v("hcBeforeNorm"), out.h_pre = v("hPre");
        out.norm_out = v("normOut"), out.sum_out = v("sumOut");
      }
      o.hc_eps = call.hc_eps, o.norm_eps = call.norm_eps;
      ps::ForwardProblem p;
      if (cpp_eps(call.hc_eps) && cpp_eps(call.norm_eps)) s = mhc::pre_sinkhorn_forward(in, out, o);
      else if ((s = ps::validate_forward(in, out, o, &p, {.eps_values = false})).ok())
        s = ps::run_forward_in_thread_workspace(p, o.num_threads);
      break;
    }
    case Op::pre_sinkhorn_backward: {
      const mhc::PreSinkhornBackwardInputs in{v("gradHin"), v("gradHPost"), v("gradHRes"),    v("x"),
                                              v("phi"),     v("alpha"),     v("bias"),        v("hPre"),
                                              v("hcBeforeNorm"), v("invRms"), v("sumOut"), v("normOut")};
      const mhc::PreSinkhornBackwardOutputs out{v("gradX"), v("gradPhi"), v("gradAlpha"), v("gradBias")};
      o.hc_eps = call.hc_eps;
      ps::BackwardProblem p;
      if (cpp_eps(call.hc_eps)) s = mhc::pre_sinkhorn_backward(in, out, o);
      else if ((s = ps::validate_backward(in, out, o, &p, {.eps_values = false})).ok())
        s = ps::run_backward_in_thread_workspace(p, o.num_threads);
      break;
    }
  }
  if (!s.ok()) fail(std::string(op_name(call.op)) + ": the C++ API rejects what the face accepted: " + s.message());
}

}  // namespace aclnn_layer
}  // namespace mhc_fuzz
