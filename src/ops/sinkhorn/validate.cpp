// MhcSinkhorn's validation (SPEC §10): every tensor checked, in argument order,
// into a problem descriptor. Nothing here writes memory that belongs to the caller.
#include <cmath>
#include <string>
#include <vector>

#include "ops/isa.hpp"
#include "ops/pre/operands.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc::ops::sinkhorn {
namespace {

// z's token space: [B,S,N,N] or [T,N,N] fp32, N >= 1.
Status check_matrices(const char* name, const TensorView& v, TokenSpace* s) {
  MHC_RETURN_IF_ERROR(check_view(name, v));
  MHC_RETURN_IF_ERROR(check_dtype(name, v, DType::fp32));
  if ((v.rank != 3 && v.rank != 4) || v.shape[v.rank - 1] != v.shape[v.rank - 2] || v.shape[v.rank - 1] < 1)
    return shape_error(name, "[B,S,N,N] or [T,N,N] with N >= 1", v);
  core::Dims& d = s->dims;
  d.bsnd = v.rank == 4;
  d.B = d.bsnd ? v.shape[0] : 1;
  d.S = d.bsnd ? v.shape[1] : v.shape[0];
  d.T = d.B * d.S;
  d.N = d.D = v.shape[v.rank - 1];
  int64_t elements;  // an empty batch passes check_view whatever N is
  if (!within_limit(d.N, d.N, &d.K) || !within_limit(d.T, d.K, &elements))
    return shape_error(name, std::string("N*N and T*N*N of at most ") + kMaxOperandText, v);
  s->dtype = DType::fp32;
  return {};
}

Status check_like(const char* name, const TensorView& v, const TokenSpace& s) {
  return check_fp32(name, v, {s.shape({"N", "N"}, {s.dims.N, s.dims.N})});
}

Status check_iterations(const char* name, int64_t num_iters, const core::Dims& d) {
  if (num_iters < 1) return value_error(name, "expected >= 1, got " + std::to_string(num_iters));
  // A recompute keeps 2I (N*N + N) floats per lane of a worker's scratch.
  constexpr int64_t kMaxStateFloats = int64_t(1) << 32;
  int64_t steps, floats;
  if (!within_limit(2, num_iters, &steps) || !within_limit(steps, d.N * d.N + d.N, &floats) ||
      floats > kMaxStateFloats)
    return value_error(name, "expected 2 * num_iters * (N*N + N) of at most 2^32, got num_iters " +
                                 std::to_string(num_iters) + " with N " + std::to_string(d.N));
  return {};
}

Status check_eps_value(const char* name, double eps, const Rules& rules) {
  if (rules.eps_values) return check_eps(name, eps);
  return {};
}

// A cache: contiguous fp32 [2I, <z's token dims>, inner..., P] with P >= N; sets
// *pitch from the first cache and *iterations from its leading dim when asked.
Status check_cache(const char* name, const TensorView& v, const TokenSpace& s, bool matrix, int64_t* iterations,
                   int64_t* pitch) {
  MHC_RETURN_IF_ERROR(check_view(name, v));
  MHC_RETURN_IF_ERROR(check_dtype(name, v, DType::fp32));
  const core::Dims& d = s.dims;
  std::vector<int64_t> token_dims = d.bsnd ? std::vector<int64_t>{d.B, d.S} : std::vector<int64_t>{d.T};
  const int rank = 1 + int(token_dims.size()) + (matrix ? 2 : 1);
  const std::string tokens = d.bsnd ? "B,S" : "T";
  const std::string expected_label = std::string("[2I,") + tokens + (matrix ? ",N,P]" : ",P]") + " with N=" +
                                     std::to_string(d.N) + (*pitch > 0 ? ", P=" + std::to_string(*pitch) : ", P>=N") +
                                     (*iterations > 0 ? ", 2I=" + std::to_string(2 * *iterations) : "") +
                                     ", token dims " + dims_string(token_dims.data(), int(token_dims.size()));
  bool ok = v.rank == rank;
  if (ok) {
    ok = v.shape[0] >= 2 && v.shape[0] % 2 == 0 && (*iterations == 0 || v.shape[0] == 2 * *iterations);
    for (size_t i = 0; i < token_dims.size(); ++i) ok = ok && v.shape[1 + i] == token_dims[i];
    if (matrix) ok = ok && v.shape[rank - 2] == d.N;
    const int64_t p = v.shape[rank - 1];
    ok = ok && p >= d.N && (*pitch == 0 || p == *pitch);
  }
  if (!ok) return shape_error(name, expected_label, v);
  bool empty = false;  // an empty cache has no layout
  for (int i = 0; i < v.rank; ++i) empty = empty || v.shape[i] == 0;
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0 && !empty; --i) {
    if (v.shape[i] > 1 && v.strides[i] != stride)
      return layout_error(name, "expected a contiguous tensor (the caches' layout is the library's), got strides " +
                                    dims_string(v.strides.data(), v.rank));
    stride *= v.shape[i];
  }
  *iterations = v.shape[0] / 2;
  *pitch = v.shape[rank - 1];
  return {};
}

// Both caches or neither; `missing` names the one absent.
Status check_cache_pair(const std::optional<TensorView>& norm_out, const std::optional<TensorView>& sum_out) {
  if (bool(norm_out) != bool(sum_out))
    return null_error(norm_out ? "sum_out" : "norm_out",
                      "the caches norm_out and sum_out come both or neither; this one is missing");
  return {};
}

}  // namespace

Status validate_forward(const SinkhornForwardInputs& in, const SinkhornForwardOutputs& out, const Options& options,
                        core::SinkhornProblem* p, const Rules& rules) {
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_matrices("z", in.z, &s));
  MHC_RETURN_IF_ERROR(check_eps_value("eps", in.eps, rules));
  MHC_RETURN_IF_ERROR(check_iterations("num_iters", in.num_iters, s.dims));
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  MHC_RETURN_IF_ERROR(check_like("h_res", out.h_res, s));
  MHC_RETURN_IF_ERROR(check_cache_pair(out.norm_out, out.sum_out));
  int64_t iterations = in.num_iters, pitch = 0;
  if (out.norm_out) {
    MHC_RETURN_IF_ERROR(check_cache("norm_out", *out.norm_out, s, true, &iterations, &pitch));
    MHC_RETURN_IF_ERROR(check_cache("sum_out", *out.sum_out, s, false, &iterations, &pitch));
  }
  NamedList outputs = {{"h_res", &out.h_res}};
  if (out.norm_out) {
    outputs.push_back({"norm_out", &*out.norm_out});
    outputs.push_back({"sum_out", &*out.sum_out});
  }
  NamedList inputs;
  if (!rules.driver_buffer) inputs.push_back({"z", &in.z});
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
  Isa isa;
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &isa));

  core::SinkhornProblem problem;
  problem.isa = isa;
  problem.B = s.dims.B, problem.S = s.dims.S, problem.T = s.dims.T, problem.N = s.dims.N;
  problem.I = in.num_iters;
  problem.eps = float(in.eps);
  problem.z = s.resolve(in.z);
  problem.h_res = s.resolve(out.h_res);
  if (out.norm_out) {
    problem.pitch = pitch;
    problem.norm_out = static_cast<float*>(out.norm_out->data);
    problem.sum_out = static_cast<float*>(out.sum_out->data);
  }
  *p = problem;
  return {};
}

Status validate_backward(const SinkhornBackwardInputs& in, const SinkhornBackwardOutputs& out,
                         const Options& options, core::SinkhornProblem* p, const Rules& rules) {
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_matrices("grad_h_res", in.grad_h_res, &s));
  MHC_RETURN_IF_ERROR(check_cache_pair(in.norm_out, in.sum_out));
  const bool caches = bool(in.norm_out);
  if (caches && in.z)
    return value_error("z", "the backward runs from the caches or from z, not both: give one");
  if (!caches && !in.z)
    return null_error("norm_out", "the backward needs the forward's caches (norm_out, sum_out) or z, got neither");
  int64_t iterations = 0, pitch = 0;
  if (caches) {
    MHC_RETURN_IF_ERROR(check_cache("norm_out", *in.norm_out, s, true, &iterations, &pitch));
    MHC_RETURN_IF_ERROR(check_cache("sum_out", *in.sum_out, s, false, &iterations, &pitch));
    MHC_RETURN_IF_ERROR(check_iterations("norm_out", iterations, s.dims));  // 2I from its first dim
  } else {
    MHC_RETURN_IF_ERROR(check_like("z", *in.z, s));
    MHC_RETURN_IF_ERROR(check_eps_value("eps", in.eps, rules));
    MHC_RETURN_IF_ERROR(check_iterations("num_iters", in.num_iters, s.dims));
    iterations = in.num_iters;
  }
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  MHC_RETURN_IF_ERROR(check_like("grad_z", out.grad_z, s));
  NamedList inputs = {{"grad_h_res", &in.grad_h_res}};
  if (caches) {
    inputs.push_back({"norm_out", &*in.norm_out});
    inputs.push_back({"sum_out", &*in.sum_out});
  } else {
    inputs.push_back({"z", &*in.z});
  }
  if (!rules.driver_buffer)
    MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, {{"grad_z", &out.grad_z}}, nullptr, nullptr));
  Isa isa;
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &isa));

  core::SinkhornProblem problem;
  problem.isa = isa;
  problem.B = s.dims.B, problem.S = s.dims.S, problem.T = s.dims.T, problem.N = s.dims.N;
  problem.I = iterations;
  problem.eps = float(in.eps);
  problem.grad_h_res = s.resolve(in.grad_h_res);
  problem.grad_z = s.resolve(out.grad_z);
  if (caches) {
    problem.pitch = pitch;
    problem.norm_out = static_cast<float*>(in.norm_out->data);
    problem.sum_out = static_cast<float*>(in.sum_out->data);
  } else {
    problem.z = s.resolve(*in.z);
  }
  *p = problem;
  return {};
}

}  // namespace mhc::ops::sinkhorn
