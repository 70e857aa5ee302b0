// The pre operators' operand checks (operands.hpp).
#include "ops/pre/operands.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "ops/isa.hpp"

namespace mhc::ops {
int64_t factorial_saturated(int64_t n) {
  int64_t f = 1;
  for (int64_t i = 2; i <= n; ++i)
    if (__builtin_mul_overflow(f, i, &f)) return INT64_MAX;
  return f;
}

static_assert(kMaxOperandElements == int64_t(1) << 44, "kMaxOperandText says 2^44");
const char* const kMaxOperandText = "2^44 elements, more than any machine's memory";

bool within_limit(int64_t a, int64_t b, int64_t* product) {
  return !__builtin_mul_overflow(a, b, product) && *product <= kMaxOperandElements;
}

ShapeOption TokenSpace::shape(std::initializer_list<const char*> names, DimList inner) const {
  return per_token_shape(dims.bsnd, dims.bsnd ? DimList{dims.B, dims.S} : DimList{dims.T}, names, inner);
}

Status check_x(const char* name, const TensorView& x, TokenSpace* space) {
  MHC_RETURN_IF_ERROR(check_view(name, x));
  if (x.dtype != DType::bf16 && x.dtype != DType::fp16 && x.dtype != DType::fp32)
    return dtype_error(name, "bf16, fp16 or fp32", x.dtype);
  if (x.rank != 3 && x.rank != 4)
    return shape_error(name, "[B,S,N,D] or [T,N,D]", x);
  core::Dims& d = space->dims;
  d.bsnd = x.rank == 4;
  d.B = d.bsnd ? x.shape[0] : 1;
  d.S = d.bsnd ? x.shape[1] : x.shape[0];
  d.N = x.shape[x.rank - 2];
  d.D = x.shape[x.rank - 1];
  if (d.N < 1 || d.D < 1)
    return shape_error(name, "N >= 1 and D >= 1 in [B,S,N,D] or [T,N,D]", x);
  d.T = d.B * d.S;  // cannot overflow: x's element count B*S*N*D fits, N and D are >= 1
  int64_t tokens_elements;  // an empty batch (T = 0) passes check_view whatever N and D are
  if (!within_limit(d.N, d.D, &d.K) || !within_limit(d.T, d.K, &tokens_elements))
    return shape_error(name, std::string("N*D and T*N*D of at most ") + kMaxOperandText, x);
  space->dtype = x.dtype;
  return {};
}

// phi fixes F, alpha must agree: [2] exactly when F = 2N, [1] exactly when F = N.
Status check_phi_alpha(const char* phi_name, const TensorView& phi, const char* alpha_name,
                       const TensorView& alpha, core::Dims* d) {
  MHC_RETURN_IF_ERROR(check_view(phi_name, phi));
  MHC_RETURN_IF_ERROR(check_dtype(phi_name, phi, DType::fp32));
  const int64_t N = d->N, fact = factorial_saturated(N);
  int64_t f_square;  // 2N + N*N, saturated (only compared against a tensor dim)
  if (__builtin_mul_overflow(N, N, &f_square) || __builtin_add_overflow(f_square, 2 * N, &f_square))
    f_square = INT64_MAX;
  const int64_t f_perm = fact > INT64_MAX - 2 * N ? INT64_MAX : 2 * N + fact;
  const bool rows_ok = phi.rank == 2 && phi.shape[1] == d->K &&
                       (phi.shape[0] == f_square || phi.shape[0] == f_perm || phi.shape[0] == 2 * N ||
                        phi.shape[0] == N);
  if (!rows_ok) {
    std::string expected = "[F,K] with K=N*D=" + std::to_string(d->K) + " and F one of 2N+N*N=" +
                           std::to_string(f_square);
    if (f_perm != f_square)
      expected += ", 2N+N!=" + (f_perm == INT64_MAX ? std::string("(too large)") : std::to_string(f_perm));
    expected += ", 2N=" + std::to_string(2 * N) + " (two-entry alpha), N=" + std::to_string(N) + " (the head)";
    return shape_error(phi_name, expected, phi);
  }
  d->F = phi.shape[0];
  int64_t phi_elements, mix_elements;
  if (!within_limit(d->F, d->K, &phi_elements) || !within_limit(d->T, d->F, &mix_elements))
    return shape_error(phi_name, std::string("F*K and T*F of at most ") + kMaxOperandText, phi);
  d->head = d->F == N;
  d->R = d->head ? 0 : d->F - 2 * N;
  d->two_entry_alpha = !d->head && d->R == 0;
  MHC_RETURN_IF_ERROR(check_view(alpha_name, alpha));
  MHC_RETURN_IF_ERROR(check_dtype(alpha_name, alpha, DType::fp32));
  const int64_t entries = d->alpha_entries();
  if (alpha.rank == 1 && alpha.shape[0] == entries) return {};
  const std::string why = d->head              ? " (phi has F=N rows: the head, the pre branch only)"
                          : d->two_entry_alpha ? " (phi has F=2N rows: no residual branch)"
                                               : " (phi has F=2N+R rows, R=" + std::to_string(d->R) + ")";
  return check_shape(alpha_name, alpha, {{{entries}, {}, "[" + std::to_string(entries) + "]" + why}},
                               nullptr);
}

Status check_fp32(const char* name, const TensorView& v, const ShapeOptions& shapes,
                  int* chosen) {
  MHC_RETURN_IF_ERROR(check_view(name, v));
  MHC_RETURN_IF_ERROR(check_dtype(name, v, DType::fp32));
  return check_shape(name, v, shapes, chosen);
}

Status check_like_x(const char* name, const TensorView& v, const TokenSpace& space,
                    const ShapeOption& shape) {
  return check_like_x_or(name, v, space, shape, "");
}

Status check_like_x_or(const char* name, const TensorView& v, const TokenSpace& space, const ShapeOption& shape,
                       const char* also) {
  MHC_RETURN_IF_ERROR(check_view(name, v));
  if (v.dtype != space.dtype)
    return dtype_error(name, std::string(core::dtype_name(space.dtype)) + " (x's dtype)" + also, v.dtype);
  return check_shape(name, v, {shape}, nullptr);
}

// h_res / grad_h_res: [..,N,N] (only when R = N*N) or flat [..,R].
ShapeOptions residual_shapes(const TokenSpace& s) {
  ShapeOptions shapes;
  if (s.dims.R == s.dims.N * s.dims.N) shapes.push_back(s.shape({"N", "N"}, {s.dims.N, s.dims.N}));
  shapes.push_back(s.shape({"R"}, {s.dims.R}));
  return shapes;
}

Status check_gamma(const char* name, const TensorView& gamma, const core::Dims& d) {
  return check_fp32(name, gamma, {{{d.N, d.D}, {"N", "D"}}});
}

Status check_eps(const char* name, double value) {
  if (!std::isfinite(value) || value < 0)
    return value_error(name, "expected a finite value >= 0, got " + std::to_string(value));
  return {};
}

Status check_outputs_disjoint(const NamedList& inputs, const NamedList& outputs,
                              const TensorView* allowed_out, const TensorView* allowed_in) {
  auto intersects = [](ByteSpan a, ByteSpan b) {
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    MHC_RETURN_IF_ERROR(check_no_self_overlap(outputs[i].name, *outputs[i].view));
    const auto span = byte_span(*outputs[i].view);
    for (size_t j = 0; j < i; ++j)
      if (intersects(span, byte_span(*outputs[j].view)))
        return layout_error(outputs[i].name, std::string("output memory overlaps output ") +
                                                           outputs[j].name);
    for (const Named& in : inputs) {
      if (outputs[i].view == allowed_out && in.view == allowed_in &&
          same_view(*allowed_out, *allowed_in))
        continue;
      if (intersects(span, byte_span(*in.view)))
        return layout_error(
            outputs[i].name, std::string("output memory overlaps input ") + in.name +
                                 (outputs[i].view == allowed_out && in.view == allowed_in
                                      ? " (only an exact alias of grad_x_post is allowed)" : ""));
    }
  }
  return {};
}

Status check_threads(int num_threads) {
  if (num_threads < 0) return value_error("num_threads", "expected >= 0, got " + std::to_string(num_threads));
  return {};
}

Status check_isa(Isa requested, Isa* chosen) { return resolve_isa(requested, chosen); }

Status check_matmul_precision(MatmulPrecision precision, bool* hf32) {
  if (precision != MatmulPrecision::fp32 && precision != MatmulPrecision::hf32)
    return value_error("matmul_precision", "expected MHC_MATMUL_FP32 (0) or MHC_MATMUL_HF32 (1), got " +
                                               std::to_string(int32_t(precision)));
  *hf32 = precision == MatmulPrecision::hf32;
  return {};
}

}  // namespace mhc::ops
