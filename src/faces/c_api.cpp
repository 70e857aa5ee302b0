// The C face: translate mhc_tensor to TensorView, call the C++ face, keep the
// last error per thread. No exception crosses the C boundary.
#include <cstring>
#include <optional>
#include <string>

#include "faces/guarded.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"

namespace {

thread_local std::string last_error;
thread_local int last_error_kind = MHC_ERROR_NONE;

mhc::TensorView to_view(const mhc_tensor& t) {
  mhc::TensorView v;
  v.data = t.data;
  v.dtype = static_cast<mhc::DType>(t.dtype);
  v.rank = t.rank;
  for (int i = 0; i < MHC_MAX_RANK; ++i) {
    v.shape[i] = t.shape[i];
    v.strides[i] = t.strides[i];
  }
  return v;
}

std::optional<mhc::TensorView> optional_view(const mhc_tensor* t) {
  if (t == nullptr) return std::nullopt;
  return to_view(*t);
}

int finish(const mhc::Status& s) {
  last_error = s.message();
  last_error_kind = static_cast<int>(s.kind());
  return static_cast<int>(s.code());
}

int fail(int code, int kind, const std::string& message) {
  last_error = message;
  last_error_kind = kind;
  return code;
}

// Required C arguments must not be NULL; report the first that is.
template <size_t N>
const char* first_null(const char* const (&names)[N], const mhc_tensor* const (&ptrs)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (ptrs[i] == nullptr) return names[i];
  return nullptr;
}

mhc::Options to_options(const mhc_options* o) {
  mhc::Options options;
  if (o) {
    options.norm_eps = o->norm_eps;
    options.hc_eps = o->hc_eps;
    options.num_threads = o->num_threads;
    options.isa = mhc::Isa(o->isa);  // a value that names no family fails validation
    options.matmul_precision = mhc::MatmulPrecision(o->matmul_precision);  // likewise
  }
  return options;
}

template <class Fn>
int guarded(Fn fn) {
  return mhc::faces::guarded(fn, [](bool out_of_memory, const char* what) {
    if (out_of_memory) return fail(MHC_ERR_RUNTIME, MHC_ERROR_RUNTIME, "out of memory");
    return fail(MHC_ERR_INTERNAL, MHC_ERROR_RUNTIME,
                what != nullptr ? std::string("internal error: ") + what : std::string("internal error"));
  });
}

}  // namespace

extern "C" {

mhc_options mhc_default_options(void) { return {1e-6, 1e-6, 0, MHC_ISA_DEFAULT, MHC_MATMUL_FP32}; }

int mhc_pre_forward(const mhc_tensor* x, const mhc_tensor* phi, const mhc_tensor* alpha,
                    const mhc_tensor* bias, const mhc_tensor* gamma, const mhc_tensor* h_in,
                    const mhc_tensor* h_post, const mhc_tensor* h_res, const mhc_tensor* inv_rms,
                    const mhc_tensor* h_mix, const mhc_tensor* h_pre, const mhc_options* options) {
  return guarded([&] {
    // h_post and h_res: their presence depends on alpha's entries, which validation checks.
    const char* const names[] = {"x", "phi", "alpha", "bias", "h_in"};
    const mhc_tensor* const ptrs[] = {x, phi, alpha, bias, h_in};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::PreForwardInputs in{to_view(*x), to_view(*phi), to_view(*alpha), to_view(*bias),
                                   optional_view(gamma)};
    const mhc::PreForwardOutputs out{to_view(*h_in), optional_view(h_post), optional_view(h_res),
                                     optional_view(inv_rms), optional_view(h_mix), optional_view(h_pre)};
    return finish(mhc::pre_forward(in, out, to_options(options)));
  });
}

int mhc_pre_backward(const mhc_tensor* x, const mhc_tensor* phi, const mhc_tensor* alpha,
                     const mhc_tensor* grad_h_in, const mhc_tensor* grad_h_post,
                     const mhc_tensor* grad_h_res, const mhc_tensor* inv_rms, const mhc_tensor* h_mix,
                     const mhc_tensor* h_pre, const mhc_tensor* h_post, const mhc_tensor* gamma,
                     const mhc_tensor* grad_x_post, const mhc_tensor* grad_x,
                     const mhc_tensor* grad_phi, const mhc_tensor* grad_alpha,
                     const mhc_tensor* grad_bias, const mhc_tensor* grad_gamma,
                     const mhc_options* options) {
  return guarded([&] {
    // grad_h_post, grad_h_res, h_post: their presence depends on alpha's entries (validation).
    const char* const names[] = {"x", "phi", "alpha", "grad_h_in", "inv_rms", "h_mix",
                                 "h_pre", "grad_x", "grad_phi", "grad_alpha", "grad_bias"};
    const mhc_tensor* const ptrs[] = {x, phi, alpha, grad_h_in, inv_rms, h_mix,
                                      h_pre, grad_x, grad_phi, grad_alpha, grad_bias};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::PreBackwardInputs in{to_view(*x), to_view(*phi), to_view(*alpha), to_view(*grad_h_in),
                                    optional_view(grad_h_post), optional_view(grad_h_res), to_view(*inv_rms),
                                    to_view(*h_mix), to_view(*h_pre), optional_view(h_post),
                                    optional_view(gamma), optional_view(grad_x_post)};
    const mhc::PreBackwardOutputs out{to_view(*grad_x), to_view(*grad_phi), to_view(*grad_alpha),
                                      to_view(*grad_bias), optional_view(grad_gamma)};
    return finish(mhc::pre_backward(in, out, to_options(options)));
  });
}

int mhc_sinkhorn_forward(const mhc_tensor* z, double eps, int64_t num_iters, const mhc_tensor* h_res,
                         const mhc_tensor* norm_out, const mhc_tensor* sum_out, const mhc_options* options) {
  return guarded([&] {
    const char* const names[] = {"z", "h_res"};
    const mhc_tensor* const ptrs[] = {z, h_res};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::SinkhornForwardInputs in{to_view(*z), eps, num_iters};
    const mhc::SinkhornForwardOutputs out{to_view(*h_res), optional_view(norm_out), optional_view(sum_out)};
    return finish(mhc::sinkhorn_forward(in, out, to_options(options)));
  });
}

int mhc_sinkhorn_backward(const mhc_tensor* grad_h_res, const mhc_tensor* norm_out, const mhc_tensor* sum_out,
                          const mhc_tensor* z, double eps, int64_t num_iters, const mhc_tensor* grad_z,
                          const mhc_options* options) {
  return guarded([&] {
    const char* const names[] = {"grad_h_res", "grad_z"};
    const mhc_tensor* const ptrs[] = {grad_h_res, grad_z};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::SinkhornBackwardInputs in{to_view(*grad_h_res), optional_view(norm_out), optional_view(sum_out),
                                         optional_view(z), eps, num_iters};
    return finish(mhc::sinkhorn_backward(in, {to_view(*grad_z)}, to_options(options)));
  });
}

int mhc_post_forward(const mhc_tensor* x, const mhc_tensor* h_res, const mhc_tensor* h_out, const mhc_tensor* h_post,
                     const mhc_tensor* out, const mhc_options* options) {
  return guarded([&] {
    const char* const names[] = {"x", "h_out", "h_post", "out"};
    const mhc_tensor* const ptrs[] = {x, h_out, h_post, out};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::PostForwardInputs in{to_view(*x), optional_view(h_res), to_view(*h_out), to_view(*h_post)};
    return finish(mhc::post_forward(in, {to_view(*out)}, to_options(options)));
  });
}

int mhc_post_backward(const mhc_tensor* grad_out, const mhc_tensor* x, const mhc_tensor* h_res,
                      const mhc_tensor* h_out, const mhc_tensor* h_post, const mhc_tensor* grad_x,
                      const mhc_tensor* grad_h_res, const mhc_tensor* grad_h_out, const mhc_tensor* grad_h_post,
                      const mhc_options* options) {
  return guarded([&] {
    const char* const names[] = {"grad_out", "x", "h_out", "h_post", "grad_x", "grad_h_out", "grad_h_post"};
    const mhc_tensor* const ptrs[] = {grad_out, x, h_out, h_post, grad_x, grad_h_out, grad_h_post};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::PostBackwardInputs in{to_view(*grad_out), to_view(*x), optional_view(h_res), to_view(*h_out),
                                     to_view(*h_post)};
    const mhc::PostBackwardOutputs out{to_view(*grad_x), optional_view(grad_h_res), to_view(*grad_h_out),
                                       to_view(*grad_h_post)};
    return finish(mhc::post_backward(in, out, to_options(options)));
  });
}

int mhc_pre_sinkhorn_forward(const mhc_tensor* x, const mhc_tensor* phi, const mhc_tensor* alpha,
                             const mhc_tensor* bias, int64_t num_iters, const mhc_tensor* h_in,
                             const mhc_tensor* h_post, const mhc_tensor* h_res, const mhc_tensor* inv_rms,
                             const mhc_tensor* h_mix, const mhc_tensor* h_pre, const mhc_tensor* norm_out,
                             const mhc_tensor* sum_out, const mhc_options* options) {
  return guarded([&] {
    const char* const names[] = {"x", "phi", "alpha", "bias", "h_in", "h_post", "h_res"};
    const mhc_tensor* const ptrs[] = {x, phi, alpha, bias, h_in, h_post, h_res};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::PreSinkhornForwardInputs in{to_view(*x), to_view(*phi), to_view(*alpha), to_view(*bias), num_iters};
    const mhc::PreSinkhornForwardOutputs out{to_view(*h_in),         to_view(*h_post),       to_view(*h_res),
                                             optional_view(inv_rms), optional_view(h_mix),   optional_view(h_pre),
                                             optional_view(norm_out), optional_view(sum_out)};
    return finish(mhc::pre_sinkhorn_forward(in, out, to_options(options)));
  });
}

int mhc_pre_sinkhorn_backward(const mhc_tensor* grad_h_in, const mhc_tensor* grad_h_post,
                              const mhc_tensor* grad_h_res, const mhc_tensor* x, const mhc_tensor* phi,
                              const mhc_tensor* alpha, const mhc_tensor* bias, const mhc_tensor* h_pre,
                              const mhc_tensor* h_mix, const mhc_tensor* inv_rms, const mhc_tensor* sum_out,
                              const mhc_tensor* norm_out, const mhc_tensor* grad_x, const mhc_tensor* grad_phi,
                              const mhc_tensor* grad_alpha, const mhc_tensor* grad_bias, const mhc_options* options) {
  return guarded([&] {
    const char* const names[] = {"grad_h_in", "grad_h_post", "grad_h_res", "x",        "phi",
                                 "alpha",     "bias",        "h_pre",      "h_mix",    "inv_rms",
                                 "sum_out",   "norm_out",    "grad_x",     "grad_phi", "grad_alpha",
                                 "grad_bias"};
    const mhc_tensor* const ptrs[] = {grad_h_in, grad_h_post, grad_h_res, x,        phi,        alpha,
                                      bias,      h_pre,       h_mix,      inv_rms,  sum_out,    norm_out,
                                      grad_x,    grad_phi,    grad_alpha, grad_bias};
    if (const char* missing = first_null(names, ptrs))
      return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(missing) + ": required, got NULL");
    const mhc::PreSinkhornBackwardInputs in{to_view(*grad_h_in), to_view(*grad_h_post), to_view(*grad_h_res),
                                            to_view(*x),         to_view(*phi),         to_view(*alpha),
                                            to_view(*bias),      to_view(*h_pre),       to_view(*h_mix),
                                            to_view(*inv_rms),   to_view(*sum_out),     to_view(*norm_out)};
    const mhc::PreSinkhornBackwardOutputs out{to_view(*grad_x), to_view(*grad_phi), to_view(*grad_alpha),
                                              to_view(*grad_bias)};
    return finish(mhc::pre_sinkhorn_backward(in, out, to_options(options)));
  });
}

const char* mhc_last_error(void) { return last_error.c_str(); }
int mhc_last_error_kind(void) { return last_error_kind; }
const char* mhc_isa(void) { return mhc::isa(); }
int mhc_set_isa(const char* name) {
  return guarded([&] { return finish(mhc::set_isa(name)); });
}
int mhc_isa_available(const char* name) {
  mhc::Isa isa;
  return mhc::isa_from_name(name, &isa) && mhc::isa_available(isa) ? 1 : 0;
}
const char* mhc_version(void) { return MHC_VERSION_STRING; }

}  // extern "C"
