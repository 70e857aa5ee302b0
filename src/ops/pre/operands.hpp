// The operand checks the pre operators share (SPEC §4): x's token space, phi
// and alpha, fp32 tensors, tensors in x's dtype, the eps values, the kernel
// family, and that outputs overlap nothing. Each error names the tensor.
#pragma once

#include <string>
#include <vector>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/tensor_checks.hpp"

namespace mhc::ops {

#define MHC_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::mhc::Status status_ = (expr);        \
    if (!status_.ok()) return status_;     \
  } while (0)

// The largest operand size the operators take: 2^44 elements (64 TiB of fp32),
// beyond any machine's memory. The products of the problem's sizes that size
// operands and workspaces are held to it, so that no later size computation can
// overflow 64 bits: an input broadcast with stride 0, or an empty batch,
// describes any dims in a few bytes.
inline constexpr int64_t kMaxOperandElements = MHC_MAX_ELEMENTS;
extern const char* const kMaxOperandText;
// *product = a * b, false if that overflows or exceeds kMaxOperandElements.
bool within_limit(int64_t a, int64_t b, int64_t* product);

// N! with saturation (only compared against a tensor dim): the permutation form's R.
int64_t factorial_saturated(int64_t n);

// What x tells: layout, B, S, T, N, D, dtype.
struct TokenSpace {
  core::Dims dims;
  DType dtype = DType::fp32;

  int leading() const { return dims.bsnd ? 2 : 1; }
  // The per-token shape with trailing dims `inner` (named `names`), in x's layout.
  ShapeOption shape(std::initializer_list<const char*> names, DimList inner) const;
  core::Strided resolve(const TensorView& v) const {
    return resolve_token_tensor(v, leading(), dims.B, dims.S);
  }
};

// x: its dtype, layout and dims into *space.
Status check_x(const char* name, const TensorView& x, TokenSpace* space);
// phi fixes F, alpha must agree: [2] exactly when F = 2N, [1] exactly when F = N.
Status check_phi_alpha(const char* phi_name, const TensorView& phi, const char* alpha_name,
                       const TensorView& alpha, core::Dims* d);
Status check_fp32(const char* name, const TensorView& v, const ShapeOptions& shapes,
                  int* chosen = nullptr);
Status check_like_x(const char* name, const TensorView& v, const TokenSpace& space, const ShapeOption& shape);
// The same, the expected dtype named with `also` after it (" or fp32").
Status check_like_x_or(const char* name, const TensorView& v, const TokenSpace& space, const ShapeOption& shape,
                       const char* also);
// h_res / grad_h_res: [..,N,N] (only when R = N*N) or flat [..,R].
ShapeOptions residual_shapes(const TokenSpace& s);
Status check_gamma(const char* name, const TensorView& gamma, const core::Dims& d);
Status check_eps(const char* name, double value);
// options.matmul_precision names a precision: whether the products take HF32 operands.
Status check_matmul_precision(MatmulPrecision precision, bool* hf32);
Status check_threads(int num_threads);
// The kernel family of the call: options.isa, else the process default; one this
// build or CPU cannot run is an error naming it.
Status check_isa(Isa requested, Isa* chosen);

// Outputs: no element written twice, no byte shared with an input or another
// output. The one allowed alias: grad_x exactly equal to grad_x_post.
struct Named {
  const char* name;
  const TensorView* view;
};
using NamedList = InlineList<Named, 24>;  // an operator's inputs or outputs
Status check_outputs_disjoint(const NamedList& inputs, const NamedList& outputs,
                              const TensorView* allowed_out, const TensorView* allowed_in);

}  // namespace mhc::ops
