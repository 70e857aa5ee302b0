// MhcCollapse's validation (SPEC §14): x first (it fixes the token space), then
// argument order. Nothing here writes memory that belongs to the caller.
#include "ops/collapse/collapse.hpp"
#include "ops/isa.hpp"
#include "ops/pre/operands.hpp"

namespace mhc::ops::collapse {
namespace {

Status check_common(const TensorView& x, const TensorView& pre_mix, const Options& options, TokenSpace* s,
                    Problem* p) {
  MHC_RETURN_IF_ERROR(check_x("x", x, s));
  MHC_RETURN_IF_ERROR(check_fp32("pre_mix", pre_mix, {s->shape({"N"}, {s->dims.N})}));
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  p->dims = s->dims;
  p->x_dtype = s->dtype;
  p->x = s->resolve(x);
  p->pre_mix = s->resolve(pre_mix);
  return {};
}

}  // namespace

Status validate_forward(const CollapseForwardInputs& in, const CollapseForwardOutputs& out, const Options& options,
                        Problem* p) {
  TokenSpace s;
  Problem problem;
  MHC_RETURN_IF_ERROR(check_common(in.x, in.pre_mix, options, &s, &problem));
  MHC_RETURN_IF_ERROR(check_like_x("h", out.h, s, s.shape({"D"}, {s.dims.D})));
  MHC_RETURN_IF_ERROR(check_outputs_disjoint({{"x", &in.x}, {"pre_mix", &in.pre_mix}}, {{"h", &out.h}}, nullptr,
                                             nullptr));
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &problem.isa));
  problem.h = s.resolve(out.h);
  *p = problem;
  return {};
}

Status validate_backward(const CollapseBackwardInputs& in, const CollapseBackwardOutputs& out,
                         const Options& options, Problem* p) {
  TokenSpace s;
  Problem problem;
  MHC_RETURN_IF_ERROR(check_common(in.x, in.pre_mix, options, &s, &problem));
  const core::Dims& d = s.dims;
  MHC_RETURN_IF_ERROR(check_like_x("grad_h", in.grad_h, s, s.shape({"D"}, {d.D})));
  MHC_RETURN_IF_ERROR(check_like_x("grad_x", out.grad_x, s, s.shape({"N", "D"}, {d.N, d.D})));
  MHC_RETURN_IF_ERROR(check_fp32("grad_pre_mix", out.grad_pre_mix, {s.shape({"N"}, {d.N})}));
  MHC_RETURN_IF_ERROR(check_outputs_disjoint({{"grad_h", &in.grad_h}, {"x", &in.x}, {"pre_mix", &in.pre_mix}},
                                             {{"grad_x", &out.grad_x}, {"grad_pre_mix", &out.grad_pre_mix}},
                                             nullptr, nullptr));
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &problem.isa));
  problem.grad_h = s.resolve(in.grad_h);
  problem.grad_x = s.resolve(out.grad_x);
  problem.grad_pre_mix = s.resolve(out.grad_pre_mix);
  *p = problem;
  return {};
}

}  // namespace mhc::ops::collapse
