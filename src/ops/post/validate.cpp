// MhcPost's validation (SPEC §11): every tensor checked into a problem
// descriptor; x first (it fixes the token space), then argument order. Nothing
// here writes memory that belongs to the caller.
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "ops/isa.hpp"
#include "ops/post/post.hpp"
#include "ops/pre/operands.hpp"

namespace mhc::ops::post {
namespace {

struct Shapes {
  ShapeOption streams, columns, vector, matrix;  // [..,N,D] [..,D] [..,N] [..,N,N]
};
Shapes shapes_of(const TokenSpace& s) {
  const core::Dims& d = s.dims;
  return {s.shape({"N", "D"}, {d.N, d.D}), s.shape({"D"}, {d.D}), s.shape({"N"}, {d.N}),
          s.shape({"N", "N"}, {d.N, d.N})};
}

// x, h_res, h_out, h_post (the forward's inputs, the backward's too).
Status check_inputs(const TensorView& x, const std::optional<TensorView>& h_res, const TensorView& h_out,
                    const TensorView& h_post, TokenSpace* s, Shapes* shapes) {
  MHC_RETURN_IF_ERROR(check_x("x", x, s));
  *shapes = shapes_of(*s);
  if (h_res) MHC_RETURN_IF_ERROR(check_fp32("h_res", *h_res, {shapes->matrix}));
  MHC_RETURN_IF_ERROR(check_like_x("h_out", h_out, *s, shapes->columns));
  MHC_RETURN_IF_ERROR(check_fp32("h_post", h_post, {shapes->vector}));
  return {};
}

void fill(core::PostProblem* p, const TokenSpace& s, Isa isa, const TensorView& x, const std::optional<TensorView>& h_res,
          const TensorView& h_out, const TensorView& h_post) {
  p->isa = isa;
  p->dims = s.dims;
  p->x_dtype = s.dtype;
  p->x = s.resolve(x);
  if (h_res) p->h_res = s.resolve(*h_res);
  p->h_out = s.resolve(h_out);
  p->h_post = s.resolve(h_post);
}

// grad_x: x's dtype, or fp32 when the face allows it.
Status check_grad_x(const TensorView& grad_x, const TokenSpace& s, const ShapeOption& streams, bool fp32_allowed) {
  if (!fp32_allowed || grad_x.dtype == s.dtype) return check_like_x("grad_x", grad_x, s, streams);
  MHC_RETURN_IF_ERROR(check_view("grad_x", grad_x));
  if (grad_x.dtype != DType::fp32)
    return dtype_error("grad_x", std::string(core::dtype_name(s.dtype)) + " (x's dtype) or fp32", grad_x.dtype);
  return check_shape("grad_x", grad_x, {streams}, nullptr);
}

}  // namespace

Status validate_forward(const PostForwardInputs& in, const PostForwardOutputs& out, const Options& options,
                        core::PostProblem* p) {
  TokenSpace s;
  Shapes shapes;
  MHC_RETURN_IF_ERROR(check_inputs(in.x, in.h_res, in.h_out, in.h_post, &s, &shapes));
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  MHC_RETURN_IF_ERROR(check_like_x("out", out.out, s, shapes.streams));
  NamedList inputs = {{"x", &in.x}, {"h_out", &in.h_out}, {"h_post", &in.h_post}};
  if (in.h_res) inputs.push_back({"h_res", &*in.h_res});
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, {{"out", &out.out}}, nullptr, nullptr));
  Isa isa;
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &isa));
  core::PostProblem problem;
  fill(&problem, s, isa, in.x, in.h_res, in.h_out, in.h_post);
  problem.out = s.resolve(out.out);
  *p = problem;
  return {};
}

Status validate_backward(const PostBackwardInputs& in, const PostBackwardOutputs& out, const Options& options,
                         core::PostProblem* p, const Rules& rules) {
  TokenSpace s;
  Shapes shapes;
  MHC_RETURN_IF_ERROR(check_inputs(in.x, in.h_res, in.h_out, in.h_post, &s, &shapes));
  MHC_RETURN_IF_ERROR(check_like_x("grad_out", in.grad_out, s, shapes.streams));
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  if (rules.grad_x) MHC_RETURN_IF_ERROR(check_grad_x(out.grad_x, s, shapes.streams, rules.fp32_grad_x));
  if (out.grad_h_res) MHC_RETURN_IF_ERROR(check_fp32("grad_h_res", *out.grad_h_res, {shapes.matrix}));
  MHC_RETURN_IF_ERROR(check_like_x("grad_h_out", out.grad_h_out, s, shapes.columns));
  MHC_RETURN_IF_ERROR(check_fp32("grad_h_post", out.grad_h_post, {shapes.vector}));
  NamedList inputs = {{"grad_out", &in.grad_out}, {"x", &in.x}, {"h_out", &in.h_out}, {"h_post", &in.h_post}};
  if (in.h_res) inputs.push_back({"h_res", &*in.h_res});
  NamedList outputs;
  if (rules.grad_x) outputs.push_back({"grad_x", &out.grad_x});
  if (out.grad_h_res) outputs.push_back({"grad_h_res", &*out.grad_h_res});
  outputs.push_back({"grad_h_out", &out.grad_h_out});
  outputs.push_back({"grad_h_post", &out.grad_h_post});
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
  Isa isa;
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &isa));
  core::PostProblem problem;
  fill(&problem, s, isa, in.x, in.h_res, in.h_out, in.h_post);
  problem.grad_out = s.resolve(in.grad_out);
  if (rules.grad_x) problem.grad_x = s.resolve(out.grad_x);
  if (out.grad_h_res) problem.grad_h_res = s.resolve(*out.grad_h_res);
  problem.grad_h_out = s.resolve(out.grad_h_out);
  problem.grad_h_post = s.resolve(out.grad_h_post);
  *p = problem;
  return {};
}

}  // namespace mhc::ops::post
