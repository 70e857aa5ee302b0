// The C face: translate mhc_tensor to TensorView, call the C++ face, keep the
// last error per thread. No exception crosses the C boundary.
#include <cstddef>
#include <cstring>
#include <optional>
#include <memory>
#include <string>
#include <utility>

#include "faces/guarded.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"

// The C handle of prepared weights: the C++ one, shared.
struct mhc_prepared_pre {
  std::shared_ptr<const mhc::PreparedPre> handle;
};

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

// The options as the caller's struct_size lets them be read: fields past it keep their defaults.
bool to_options(const mhc_options* o, mhc::Options* options) {
  if (o == nullptr) return true;
  constexpr uint32_t kFirstVersion = offsetof(mhc_options, matmul_precision) + sizeof(o->matmul_precision);
  if (o->struct_size < kFirstVersion) {
    fail(MHC_ERR_INVALID, MHC_ERROR_VALUE,
         "options: struct_size " + std::to_string(o->struct_size) + " is less than the " +
             std::to_string(kFirstVersion) + " bytes of the first mhc_options (start from mhc_default_options())");
    return false;
  }
  options->norm_eps = o->norm_eps;
  options->hc_eps = o->hc_eps;
  options->num_threads = o->num_threads;
  options->isa = mhc::Isa(o->isa);  // a value that names no family fails validation
  options->matmul_precision = mhc::MatmulPrecision(o->matmul_precision);  // likewise
  if (o->struct_size >= offsetof(mhc_options, prepared) + sizeof(o->prepared) && o->prepared != nullptr)
    options->prepared = o->prepared->handle.get();
  return true;
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

// Each operator's C function, made from its description (description/operators.def): the
// parameters in order, the first required tensor that is NULL reported, the views handed to
// the C++ face in its Inputs and Outputs structs (designated initializers: a name or an order
// that differs from the struct's does not compile; neither does a prototype in mhc.h that
// differs from the description).
#define MHC_C_TYPE_double double
#define MHC_C_TYPE_int64 int64_t
#define MHC_C_PARAM_TENSOR(role, arg, presence, dtypes, shape) const mhc_tensor* arg,
#define MHC_C_PARAM_SCALAR(type, arg) MHC_C_TYPE_##type arg,
#define MHC_C_REQUIRE_required(arg) \
  if (arg == nullptr) return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, #arg ": required, got NULL");
#define MHC_C_REQUIRE_nullable(arg)
#define MHC_C_REQUIRE_TENSOR(role, arg, presence, dtypes, shape) MHC_C_REQUIRE_##presence(arg)
#define MHC_C_NO_SCALAR(type, arg)
#define MHC_C_VIEW_required(arg) to_view(*arg)
#define MHC_C_VIEW_nullable(arg) optional_view(arg)
#define MHC_C_FIELD_in_in(arg, view) .arg = view,
#define MHC_C_FIELD_in_out(arg, view)
#define MHC_C_FIELD_out_in(arg, view)
#define MHC_C_FIELD_out_out(arg, view) .arg = view,
#define MHC_C_INPUT_TENSOR(role, arg, presence, dtypes, shape) MHC_C_FIELD_in_##role(arg, MHC_C_VIEW_##presence(arg))
#define MHC_C_INPUT_SCALAR(type, arg) .arg = arg,
#define MHC_C_OUTPUT_TENSOR(role, arg, presence, dtypes, shape) MHC_C_FIELD_out_##role(arg, MHC_C_VIEW_##presence(arg))
#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS)                                       \
  int mhc_##name(ARGS(MHC_C_PARAM_TENSOR, MHC_C_PARAM_SCALAR) const mhc_options* options) {         \
    return guarded([&] {                                                                          \
      ARGS(MHC_C_REQUIRE_TENSOR, MHC_C_NO_SCALAR)                                                 \
      mhc::Options call_options;                                                                  \
      if (!to_options(options, &call_options)) return int(MHC_ERR_INVALID);                       \
      const mhc::Cpp##Inputs call_in{ARGS(MHC_C_INPUT_TENSOR, MHC_C_INPUT_SCALAR)};               \
      const mhc::Cpp##Outputs call_out{ARGS(MHC_C_OUTPUT_TENSOR, MHC_C_NO_SCALAR)};               \
      return finish(mhc::name(call_in, call_out, call_options));                                  \
    });                                                                                           \
  }

extern "C" {

mhc_options mhc_default_options(void) {
  return {sizeof(mhc_options), 1e-6, 1e-6, 0, MHC_ISA_DEFAULT, MHC_MATMUL_FP32, nullptr};
}

int mhc_prepare_pre(const mhc_tensor* phi, const mhc_tensor* alpha, const mhc_tensor* bias,
                    const mhc_tensor* gamma, mhc_prepared_pre** prepared) {
  return guarded([&] {
    for (auto [arg, name] : {std::pair{phi, "phi"}, {alpha, "alpha"}, {bias, "bias"}})
      if (arg == nullptr) return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, std::string(name) + ": required, got NULL");
    if (prepared == nullptr) return fail(MHC_ERR_NULLPTR, MHC_ERROR_NULL, "prepared: required, got NULL");
    std::shared_ptr<const mhc::PreparedPre> handle;
    const mhc::Status s = mhc::prepare_pre(to_view(*phi), to_view(*alpha), to_view(*bias), optional_view(gamma), &handle);
    if (s.ok()) *prepared = new mhc_prepared_pre{std::move(handle)};
    return finish(s);
  });
}

void mhc_prepared_free(mhc_prepared_pre* prepared) { delete prepared; }

#include "description/operators.def"
#undef MHC_OPERATOR

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
const char* mhc_available_isas(void) {
  static const std::string names = [] {
    std::string list;
    for (mhc::Isa isa : mhc::available_isas()) list += (list.empty() ? "" : ",") + std::string(mhc::isa_name(isa));
    return list;
  }();
  return names.c_str();
}
const char* mhc_version(void) { return MHC_VERSION_STRING; }

}  // extern "C"
