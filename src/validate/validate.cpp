// Validation: every tensor of SPEC §4 checked, in argument order, into a problem
// descriptor. Nothing here writes memory that belongs to the caller.
#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "ops/operators.hpp"
#include "validate/tensor_checks.hpp"

namespace mhc::ops {
namespace {

using validate::ShapeOption;

#define MHC_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::mhc::Status status_ = (expr);        \
    if (!status_.ok()) return status_;     \
  } while (0)

// N! with saturation (only compared against a tensor dim).
int64_t factorial_saturated(int64_t n) {
  int64_t f = 1;
  for (int64_t i = 2; i <= n; ++i)
    if (__builtin_mul_overflow(f, i, &f)) return INT64_MAX;
  return f;
}

// The largest operand size the operators take: 2^44 elements (64 TiB of fp32),
// beyond any machine's memory. The products of the problem's sizes that size
// operands and workspaces (T*K, F*K, T*F) are held to it here, so that no later
// size computation can overflow 64 bits: an input broadcast with stride 0, or an
// empty batch, describes any dims in a few bytes.
constexpr int64_t kMaxOperandElements = int64_t(1) << 44;
const char* const kMaxOperandText = "2^44 elements, more than any machine's memory";

// *product = a * b, false if that overflows or exceeds kMaxOperandElements.
bool within_limit(int64_t a, int64_t b, int64_t* product) {
  return !__builtin_mul_overflow(a, b, product) && *product <= kMaxOperandElements;
}

// What x tells: layout, B, S, T, N, D, dtype.
struct TokenSpace {
  core::Dims dims;
  DType dtype = DType::fp32;

  int leading() const { return dims.bsnd ? 2 : 1; }
  // The per-token shape with trailing dims `inner` (named `names`), in x's layout.
  ShapeOption shape(std::initializer_list<const char*> names, std::vector<int64_t> inner) const {
    std::vector<int64_t> dims_v;
    std::vector<const char*> all;
    if (dims.bsnd) { dims_v = {dims.B, dims.S}; all = {"B", "S"}; }
    else { dims_v = {dims.T}; all = {"T"}; }
    dims_v.insert(dims_v.end(), inner.begin(), inner.end());
    all.insert(all.end(), names.begin(), names.end());
    std::string lbl = "[";
    for (size_t i = 0; i < all.size(); ++i) lbl += (i ? "," : "") + std::string(all[i]);
    lbl += "]=" + validate::dims_string(dims_v.data(), int(dims_v.size()));
    return {dims_v, lbl};
  }
  core::Strided resolve(const TensorView& v) const {
    return validate::resolve_token_tensor(v, leading(), dims.B, dims.S);
  }
};

Status check_x(const char* name, const TensorView& x, TokenSpace* space) {
  MHC_RETURN_IF_ERROR(validate::check_view(name, x));
  if (x.dtype != DType::bf16 && x.dtype != DType::fp16 && x.dtype != DType::fp32)
    return validate::dtype_error(name, "bf16, fp16 or fp32", x.dtype);
  if (x.rank != 3 && x.rank != 4)
    return validate::shape_error(name, "[B,S,N,D] or [T,N,D]", x);
  core::Dims& d = space->dims;
  d.bsnd = x.rank == 4;
  d.B = d.bsnd ? x.shape[0] : 1;
  d.S = d.bsnd ? x.shape[1] : x.shape[0];
  d.N = x.shape[x.rank - 2];
  d.D = x.shape[x.rank - 1];
  if (d.N < 1 || d.D < 1)
    return validate::shape_error(name, "N >= 1 and D >= 1 in [B,S,N,D] or [T,N,D]", x);
  d.T = d.B * d.S;  // cannot overflow: x's element count B*S*N*D fits, N and D are >= 1
  int64_t tokens_elements;  // an empty batch (T = 0) passes check_view whatever N and D are
  if (!within_limit(d.N, d.D, &d.K) || !within_limit(d.T, d.K, &tokens_elements))
    return validate::shape_error(name, std::string("N*D and T*N*D of at most ") + kMaxOperandText, x);
  space->dtype = x.dtype;
  return {};
}

// phi fixes F, alpha must agree: [2] exactly when F = 2N.
Status check_phi_alpha(const char* phi_name, const TensorView& phi, const char* alpha_name,
                       const TensorView& alpha, core::Dims* d) {
  MHC_RETURN_IF_ERROR(validate::check_view(phi_name, phi));
  MHC_RETURN_IF_ERROR(validate::check_dtype(phi_name, phi, DType::fp32));
  const int64_t N = d->N, fact = factorial_saturated(N);
  int64_t f_square;  // 2N + N*N, saturated (only compared against a tensor dim)
  if (__builtin_mul_overflow(N, N, &f_square) || __builtin_add_overflow(f_square, 2 * N, &f_square))
    f_square = INT64_MAX;
  const int64_t f_perm = fact > INT64_MAX - 2 * N ? INT64_MAX : 2 * N + fact;
  const bool rows_ok = phi.rank == 2 && phi.shape[1] == d->K &&
                       (phi.shape[0] == f_square || phi.shape[0] == f_perm || phi.shape[0] == 2 * N);
  if (!rows_ok) {
    std::string expected = "[F,K] with K=N*D=" + std::to_string(d->K) + " and F one of 2N+N*N=" +
                           std::to_string(f_square);
    if (f_perm != f_square)
      expected += ", 2N+N!=" + (f_perm == INT64_MAX ? std::string("(too large)") : std::to_string(f_perm));
    expected += ", 2N=" + std::to_string(2 * N) + " (two-entry alpha)";
    return validate::shape_error(phi_name, expected, phi);
  }
  d->F = phi.shape[0];
  int64_t phi_elements, mix_elements;
  if (!within_limit(d->F, d->K, &phi_elements) || !within_limit(d->T, d->F, &mix_elements))
    return validate::shape_error(phi_name, std::string("F*K and T*F of at most ") + kMaxOperandText, phi);
  d->R = d->F - 2 * N;
  d->two_entry_alpha = d->R == 0;
  MHC_RETURN_IF_ERROR(validate::check_view(alpha_name, alpha));
  MHC_RETURN_IF_ERROR(validate::check_dtype(alpha_name, alpha, DType::fp32));
  const int64_t entries = d->two_entry_alpha ? 2 : 3;
  const std::string why = d->two_entry_alpha ? " (phi has F=2N rows: no residual branch)"
                                             : " (phi has F=2N+R rows, R=" + std::to_string(d->R) + ")";
  return validate::check_shape(alpha_name, alpha, {{{entries}, "[" + std::to_string(entries) + "]" + why}},
                               nullptr);
}

Status check_fp32(const char* name, const TensorView& v, const std::vector<ShapeOption>& shapes,
                  int* chosen = nullptr) {
  MHC_RETURN_IF_ERROR(validate::check_view(name, v));
  MHC_RETURN_IF_ERROR(validate::check_dtype(name, v, DType::fp32));
  return validate::check_shape(name, v, shapes, chosen);
}

Status check_like_x(const char* name, const TensorView& v, const TokenSpace& space,
                    const ShapeOption& shape) {
  MHC_RETURN_IF_ERROR(validate::check_view(name, v));
  if (v.dtype != space.dtype)
    return validate::dtype_error(name, std::string(core::dtype_name(space.dtype)) + " (x's dtype)",
                                 v.dtype);
  return validate::check_shape(name, v, {shape}, nullptr);
}

// h_res / grad_h_res: [..,N,N] (only when R = N*N) or flat [..,R].
std::vector<ShapeOption> residual_shapes(const TokenSpace& s) {
  std::vector<ShapeOption> shapes;
  if (s.dims.R == s.dims.N * s.dims.N) shapes.push_back(s.shape({"N", "N"}, {s.dims.N, s.dims.N}));
  shapes.push_back(s.shape({"R"}, {s.dims.R}));
  return shapes;
}

Status check_gamma(const char* name, const TensorView& gamma, const core::Dims& d) {
  return check_fp32(name, gamma, {{{d.N, d.D}, validate::label({"N", "D"}, {d.N, d.D})}});
}

Status check_eps(const char* name, double value) {
  if (!std::isfinite(value) || value < 0)
    return validate::value_error(name, "expected a finite value >= 0, got " + std::to_string(value));
  return {};
}

// Outputs: no element written twice, no byte shared with an input or another
// output. The one allowed alias: grad_x exactly equal to grad_x_post.
struct Named {
  const char* name;
  const TensorView* view;
};
Status check_outputs_disjoint(const std::vector<Named>& inputs, const std::vector<Named>& outputs,
                              const TensorView* allowed_out, const TensorView* allowed_in) {
  auto intersects = [](validate::ByteSpan a, validate::ByteSpan b) {
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    MHC_RETURN_IF_ERROR(validate::check_no_self_overlap(outputs[i].name, *outputs[i].view));
    const auto span = validate::byte_span(*outputs[i].view);
    for (size_t j = 0; j < i; ++j)
      if (intersects(span, validate::byte_span(*outputs[j].view)))
        return validate::layout_error(outputs[i].name, std::string("output memory overlaps output ") +
                                                           outputs[j].name);
    for (const Named& in : inputs) {
      if (outputs[i].view == allowed_out && in.view == allowed_in &&
          validate::same_view(*allowed_out, *allowed_in))
        continue;
      if (intersects(span, validate::byte_span(*in.view)))
        return validate::layout_error(
            outputs[i].name, std::string("output memory overlaps input ") + in.name +
                                 (outputs[i].view == allowed_out && in.view == allowed_in
                                      ? " (only an exact alias of grad_x_post is allowed)" : ""));
    }
  }
  return {};
}

}  // namespace

Status validate_forward(const PreForwardInputs& in, const PreForwardOutputs& out,
                        const Options& options, core::ForwardProblem* p) {
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  core::Dims& d = s.dims;
  MHC_RETURN_IF_ERROR(check_phi_alpha("phi", in.phi, "alpha", in.alpha, &d));
  MHC_RETURN_IF_ERROR(check_fp32("bias", in.bias, {{{d.F}, validate::label({"F"}, {d.F})}}));
  if (in.gamma) MHC_RETURN_IF_ERROR(check_gamma("gamma", *in.gamma, d));
  MHC_RETURN_IF_ERROR(check_eps("norm_eps", options.norm_eps));
  MHC_RETURN_IF_ERROR(check_eps("hc_eps", options.hc_eps));
  if (options.num_threads < 0)
    return validate::value_error("num_threads", "expected >= 0, got " + std::to_string(options.num_threads));

  MHC_RETURN_IF_ERROR(check_like_x("h_in", out.h_in, s, s.shape({"D"}, {d.D})));
  MHC_RETURN_IF_ERROR(check_fp32("h_post", out.h_post, {s.shape({"N"}, {d.N})}));
  if (d.two_entry_alpha && out.h_res)
    return validate::shape_error("h_res", "no tensor (alpha has 2 entries: no residual branch)", *out.h_res);
  if (!d.two_entry_alpha && !out.h_res)
    return validate::null_error("h_res", "required (alpha has 3 entries), got none");
  if (out.h_res) MHC_RETURN_IF_ERROR(check_fp32("h_res", *out.h_res, residual_shapes(s)));
  const int caches = int(bool(out.inv_rms)) + int(bool(out.h_mix)) + int(bool(out.h_pre));
  if (caches != 0 && caches != 3) {
    const char* missing = !out.inv_rms ? "inv_rms" : !out.h_mix ? "h_mix" : "h_pre";
    return validate::null_error(missing, "the caches inv_rms, h_mix, h_pre come all three or none; this one is missing");
  }
  if (caches == 3) {
    MHC_RETURN_IF_ERROR(check_fp32("inv_rms", *out.inv_rms, {s.shape({}, {})}));
    MHC_RETURN_IF_ERROR(check_fp32("h_mix", *out.h_mix, {s.shape({"F"}, {d.F})}));
    MHC_RETURN_IF_ERROR(check_fp32("h_pre", *out.h_pre, {s.shape({"N"}, {d.N})}));
  }

  std::vector<Named> inputs = {{"x", &in.x}, {"phi", &in.phi}, {"alpha", &in.alpha}, {"bias", &in.bias}};
  if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
  std::vector<Named> outputs = {{"h_in", &out.h_in}, {"h_post", &out.h_post}};
  if (out.h_res) outputs.push_back({"h_res", &*out.h_res});
  if (caches == 3) {
    outputs.push_back({"inv_rms", &*out.inv_rms});
    outputs.push_back({"h_mix", &*out.h_mix});
    outputs.push_back({"h_pre", &*out.h_pre});
  }
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));

  core::ForwardProblem problem;
  problem.dims = d;
  problem.norm_eps = options.norm_eps;
  problem.hc_eps = options.hc_eps;
  problem.x = s.resolve(in.x);
  problem.phi = validate::resolve_plain_tensor(in.phi);
  problem.alpha = validate::resolve_plain_tensor(in.alpha);
  problem.bias = validate::resolve_plain_tensor(in.bias);
  if (in.gamma) problem.gamma = validate::resolve_plain_tensor(*in.gamma);
  problem.h_in = s.resolve(out.h_in);
  problem.h_post = s.resolve(out.h_post);
  if (out.h_res) problem.h_res = s.resolve(*out.h_res);
  if (caches == 3) {
    problem.inv_rms = s.resolve(*out.inv_rms);
    problem.h_mix = s.resolve(*out.h_mix);
    problem.h_pre = s.resolve(*out.h_pre);
  }
  *p = problem;
  return {};
}

Status validate_backward(const PreBackwardInputs& in, const PreBackwardOutputs& out,
                         const Options& options, core::BackwardProblem* p) {
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  core::Dims& d = s.dims;
  MHC_RETURN_IF_ERROR(check_phi_alpha("phi", in.phi, "alpha", in.alpha, &d));
  MHC_RETURN_IF_ERROR(check_like_x("grad_h_in", in.grad_h_in, s, s.shape({"D"}, {d.D})));
  MHC_RETURN_IF_ERROR(check_fp32("grad_h_post", in.grad_h_post, {s.shape({"N"}, {d.N})}));
  if (d.two_entry_alpha && in.grad_h_res)
    return validate::shape_error("grad_h_res", "no tensor (alpha has 2 entries: no residual branch)", *in.grad_h_res);
  if (!d.two_entry_alpha && !in.grad_h_res)
    return validate::null_error("grad_h_res", "required (alpha has 3 entries), got none");
  if (in.grad_h_res) MHC_RETURN_IF_ERROR(check_fp32("grad_h_res", *in.grad_h_res, residual_shapes(s)));
  MHC_RETURN_IF_ERROR(check_fp32("inv_rms", in.inv_rms, {s.shape({}, {})}));
  MHC_RETURN_IF_ERROR(check_fp32("h_mix", in.h_mix, {s.shape({"F"}, {d.F})}));
  MHC_RETURN_IF_ERROR(check_fp32("h_pre", in.h_pre, {s.shape({"N"}, {d.N})}));
  MHC_RETURN_IF_ERROR(check_fp32("h_post", in.h_post, {s.shape({"N"}, {d.N})}));
  if (in.gamma) MHC_RETURN_IF_ERROR(check_gamma("gamma", *in.gamma, d));
  const ShapeOption x_shape = s.shape({"N", "D"}, {d.N, d.D});
  if (in.grad_x_post) MHC_RETURN_IF_ERROR(check_like_x("grad_x_post", *in.grad_x_post, s, x_shape));
  MHC_RETURN_IF_ERROR(check_eps("hc_eps", options.hc_eps));
  if (options.num_threads < 0)
    return validate::value_error("num_threads", "expected >= 0, got " + std::to_string(options.num_threads));

  MHC_RETURN_IF_ERROR(check_like_x("grad_x", out.grad_x, s, x_shape));
  MHC_RETURN_IF_ERROR(check_fp32("grad_phi", out.grad_phi, {{{d.F, d.K}, validate::label({"F", "K"}, {d.F, d.K})}}));
  const int64_t entries = d.two_entry_alpha ? 2 : 3;
  MHC_RETURN_IF_ERROR(check_fp32("grad_alpha", out.grad_alpha, {{{entries}, "[" + std::to_string(entries) + "] (alpha's shape)"}}));
  MHC_RETURN_IF_ERROR(check_fp32("grad_bias", out.grad_bias, {{{d.F}, validate::label({"F"}, {d.F})}}));
  if (in.gamma && !out.grad_gamma)
    return validate::null_error("grad_gamma", "required when gamma is given, got none");
  if (!in.gamma && out.grad_gamma)
    return validate::shape_error("grad_gamma", "no tensor (gamma is not given)", *out.grad_gamma);
  if (out.grad_gamma) MHC_RETURN_IF_ERROR(check_gamma("grad_gamma", *out.grad_gamma, d));

  std::vector<Named> inputs = {{"x", &in.x}, {"phi", &in.phi}, {"alpha", &in.alpha},
                               {"grad_h_in", &in.grad_h_in}, {"grad_h_post", &in.grad_h_post},
                               {"inv_rms", &in.inv_rms}, {"h_mix", &in.h_mix},
                               {"h_pre", &in.h_pre}, {"h_post", &in.h_post}};
  if (in.grad_h_res) inputs.push_back({"grad_h_res", &*in.grad_h_res});
  if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
  if (in.grad_x_post) inputs.push_back({"grad_x_post", &*in.grad_x_post});
  std::vector<Named> outputs = {{"grad_x", &out.grad_x}, {"grad_phi", &out.grad_phi},
                                {"grad_alpha", &out.grad_alpha}, {"grad_bias", &out.grad_bias}};
  if (out.grad_gamma) outputs.push_back({"grad_gamma", &*out.grad_gamma});
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, &out.grad_x,
                                             in.grad_x_post ? &*in.grad_x_post : nullptr));

  core::BackwardProblem problem;
  problem.dims = d;
  problem.hc_eps = options.hc_eps;
  problem.x = s.resolve(in.x);
  problem.phi = validate::resolve_plain_tensor(in.phi);
  problem.alpha = validate::resolve_plain_tensor(in.alpha);
  problem.grad_h_in = s.resolve(in.grad_h_in);
  problem.grad_h_post = s.resolve(in.grad_h_post);
  if (in.grad_h_res) problem.grad_h_res = s.resolve(*in.grad_h_res);
  problem.inv_rms = s.resolve(in.inv_rms);
  problem.h_mix = s.resolve(in.h_mix);
  problem.h_pre = s.resolve(in.h_pre);
  problem.h_post = s.resolve(in.h_post);
  if (in.gamma) problem.gamma = validate::resolve_plain_tensor(*in.gamma);
  if (in.grad_x_post) problem.grad_x_post = s.resolve(*in.grad_x_post);
  problem.grad_x = s.resolve(out.grad_x);
  problem.grad_phi = validate::resolve_plain_tensor(out.grad_phi);
  problem.grad_alpha = validate::resolve_plain_tensor(out.grad_alpha);
  problem.grad_bias = validate::resolve_plain_tensor(out.grad_bias);
  if (out.grad_gamma) problem.grad_gamma = validate::resolve_plain_tensor(*out.grad_gamma);
  *p = problem;
  return {};
}

}  // namespace mhc::ops
