// MhcRmsNorm's validation: x first (it fixes the token space), then argument
// order. Nothing here writes memory that belongs to the caller.
#include <string>

#include "ops/isa.hpp"
#include "ops/pre/operands.hpp"
#include "ops/rms_norm/rms_norm.hpp"

namespace mhc::ops::rms_norm {
namespace {

// x [B,S,D] or [T,D]: the token space with one stream.
Status check_rows(const char* name, const TensorView& x, TokenSpace* s) {
  MHC_RETURN_IF_ERROR(check_view(name, x));
  if (x.dtype != DType::bf16 && x.dtype != DType::fp16 && x.dtype != DType::fp32)
    return dtype_error(name, "bf16, fp16 or fp32", x.dtype);
  if (x.rank != 2 && x.rank != 3) return shape_error(name, "[B,S,D] or [T,D]", x);
  core::Dims& d = s->dims;
  d.bsnd = x.rank == 3;
  d.B = d.bsnd ? x.shape[0] : 1;
  d.S = d.bsnd ? x.shape[1] : x.shape[0];
  d.N = 1;
  d.D = x.shape[x.rank - 1];
  if (d.D < 1) return shape_error(name, "D >= 1 in [B,S,D] or [T,D]", x);
  d.T = d.B * d.S;  // x's element count T*D fits
  d.K = d.D;
  s->dtype = x.dtype;
  return {};
}

}  // namespace

Status validate_forward(const RmsNormForwardInputs& in, const RmsNormForwardOutputs& out, const Options& options,
                        Problem* p) {
  TokenSpace s;
  Problem problem;
  MHC_RETURN_IF_ERROR(check_rows("x", in.x, &s));
  const int64_t D = s.dims.D;
  MHC_RETURN_IF_ERROR(check_view("weight", in.weight));
  if (in.weight.dtype != s.dtype && in.weight.dtype != DType::fp32)
    return dtype_error("weight", std::string(core::dtype_name(s.dtype)) + " (x's) or fp32", in.weight.dtype);
  if (in.weight.rank != 1 || in.weight.shape[0] != D)
    return shape_error("weight", "[D] with D=" + std::to_string(D), in.weight);
  MHC_RETURN_IF_ERROR(check_eps("eps", in.eps));
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  MHC_RETURN_IF_ERROR(check_like_x("y", out.y, s, s.shape({"D"}, {D})));
  MHC_RETURN_IF_ERROR(check_outputs_disjoint({{"x", &in.x}, {"weight", &in.weight}}, {{"y", &out.y}}, nullptr, nullptr));
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &problem.isa));
  problem.dims = s.dims;
  problem.x_dtype = s.dtype;
  problem.eps = float(in.eps);
  problem.x = s.resolve(in.x);
  problem.weight = resolve_plain_tensor(in.weight);
  problem.y = s.resolve(out.y);
  *p = problem;
  return {};
}

}  // namespace mhc::ops::rms_norm
