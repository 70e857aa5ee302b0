// The C face's description of itself (mhc.h: mhc_operators, mhc_constants,
// mhc_struct_fields): what bindings read instead of copying the header.
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "mhc/mhc.h"

namespace {

#define MHC_DESC_KIND_in MHC_ARG_TENSOR_IN
#define MHC_DESC_KIND_out MHC_ARG_TENSOR_OUT
#define MHC_DESC_KIND_double MHC_ARG_DOUBLE
#define MHC_DESC_KIND_int64 MHC_ARG_INT64
#define MHC_DESC_NULLABLE_required 0
#define MHC_DESC_NULLABLE_nullable 1
#define MHC_DESC_TENSOR(role, arg, presence, dtypes, shape) \
  {#arg, MHC_DESC_KIND_##role, MHC_DESC_NULLABLE_##presence, dtypes, shape},
#define MHC_DESC_SCALAR(type, arg) {#arg, MHC_DESC_KIND_##type, 0, "", ""},

#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS) \
  constexpr mhc_arg_desc k_##name##_args[] = {ARGS(MHC_DESC_TENSOR, MHC_DESC_SCALAR)};
#include "description/operators.def"
#undef MHC_OPERATOR

constexpr mhc_operator_desc kOperators[] = {
#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS) \
  {#name, spec, cann, torch_npu, int32_t(std::size(k_##name##_args)), k_##name##_args},
#include "description/operators.def"
#undef MHC_OPERATOR
};

constexpr mhc_torch_op kTorchOps[] = {
#define MHC_TORCH_OP(op, name, schema) {#name, #op, schema},
#include "description/operators.def"
#undef MHC_TORCH_OP
};

#define MHC_CONSTANT(name) {#name, MHC_##name}
constexpr mhc_constant kConstants[] = {
    MHC_CONSTANT(MAX_RANK),        MHC_CONSTANT(MAX_ELEMENTS),     MHC_CONSTANT(BF16),
    MHC_CONSTANT(FP16),            MHC_CONSTANT(FP32),             MHC_CONSTANT(OK),
    MHC_CONSTANT(ERR_NULLPTR),     MHC_CONSTANT(ERR_INVALID),      MHC_CONSTANT(ERR_RUNTIME),
    MHC_CONSTANT(ERR_INTERNAL),    MHC_CONSTANT(ERROR_NONE),       MHC_CONSTANT(ERROR_NULL),
    MHC_CONSTANT(ERROR_DTYPE),     MHC_CONSTANT(ERROR_SHAPE),      MHC_CONSTANT(ERROR_LAYOUT),
    MHC_CONSTANT(ERROR_VALUE),     MHC_CONSTANT(ERROR_RUNTIME),    MHC_CONSTANT(ISA_DEFAULT),
    MHC_CONSTANT(ISA_AMX),         MHC_CONSTANT(ISA_AVX512),       MHC_CONSTANT(ISA_AVX2),
    MHC_CONSTANT(ISA_PORTABLE),    MHC_CONSTANT(ISA_REFERENCE),    MHC_CONSTANT(ISA_SVE2),
    MHC_CONSTANT(ISA_SVE),         MHC_CONSTANT(ISA_NEON),         MHC_CONSTANT(MATMUL_FP32),
    MHC_CONSTANT(MATMUL_HF32),     MHC_CONSTANT(ARG_TENSOR_IN),    MHC_CONSTANT(ARG_TENSOR_OUT),
    MHC_CONSTANT(ARG_DOUBLE),      MHC_CONSTANT(ARG_INT64),        MHC_CONSTANT(FIELD_POINTER),
    MHC_CONSTANT(FIELD_INT32),     MHC_CONSTANT(FIELD_UINT32),     MHC_CONSTANT(FIELD_INT64),
    MHC_CONSTANT(FIELD_DOUBLE),
};

template <class T>
constexpr int32_t field_kind() {
  if constexpr (std::is_pointer_v<T>) return MHC_FIELD_POINTER;
  else if constexpr (std::is_same_v<T, int32_t>) return MHC_FIELD_INT32;
  else if constexpr (std::is_same_v<T, uint32_t>) return MHC_FIELD_UINT32;
  else if constexpr (std::is_same_v<T, int64_t>) return MHC_FIELD_INT64;
  else {
    static_assert(std::is_same_v<T, double>, "a field kind mhc_field_kind has no name for");
    return MHC_FIELD_DOUBLE;
  }
}
template <class T>
constexpr mhc_field_desc field(const char* name, int64_t offset) {
  if constexpr (std::is_array_v<T>)
    return {name, field_kind<std::remove_extent_t<T>>(), int32_t(std::extent_v<T>), offset};
  else
    return {name, field_kind<T>(), 1, offset};
}
#define MHC_FIELD(S, f) field<decltype(S::f)>(#f, offsetof(S, f))

constexpr mhc_field_desc kTensorFields[] = {MHC_FIELD(mhc_tensor, data), MHC_FIELD(mhc_tensor, dtype),
                                            MHC_FIELD(mhc_tensor, rank), MHC_FIELD(mhc_tensor, shape),
                                            MHC_FIELD(mhc_tensor, strides)};
constexpr mhc_field_desc kOptionsFields[] = {
    MHC_FIELD(mhc_options, struct_size), MHC_FIELD(mhc_options, norm_eps),   MHC_FIELD(mhc_options, hc_eps),
    MHC_FIELD(mhc_options, num_threads), MHC_FIELD(mhc_options, isa), MHC_FIELD(mhc_options, matmul_precision),
    MHC_FIELD(mhc_options, prepared)};
// Every byte of each struct is some field's: a field added to mhc.h and not here fails to compile.
template <class S, size_t N>
constexpr bool covers(const mhc_field_desc (&fields)[N]) {
  int64_t end = 0;
  for (const mhc_field_desc& f : fields) {
    const int64_t bytes = f.kind == MHC_FIELD_POINTER ? sizeof(void*)
                          : f.kind == MHC_FIELD_INT32 || f.kind == MHC_FIELD_UINT32 ? 4 : 8;
    end = f.offset + bytes * f.count;
  }
  return end + int64_t(alignof(S)) > int64_t(sizeof(S));
}
static_assert(covers<mhc_tensor>(kTensorFields), "mhc_tensor has a field kTensorFields lacks");
static_assert(covers<mhc_options>(kOptionsFields), "mhc_options has a field kOptionsFields lacks");

}  // namespace

extern "C" {

const mhc_operator_desc* mhc_operators(int32_t* count) {
  if (count != nullptr) *count = int32_t(std::size(kOperators));
  return kOperators;
}

const mhc_torch_op* mhc_torch_ops(int32_t* count) {
  if (count != nullptr) *count = int32_t(std::size(kTorchOps));
  return kTorchOps;
}

const mhc_constant* mhc_constants(int32_t* count) {
  if (count != nullptr) *count = int32_t(std::size(kConstants));
  return kConstants;
}

const mhc_field_desc* mhc_struct_fields(const char* struct_name, int32_t* count, int64_t* size) {
  const mhc_field_desc* fields = nullptr;
  int32_t n = 0;
  int64_t bytes = 0;
  if (struct_name != nullptr && std::strcmp(struct_name, "mhc_tensor") == 0)
    fields = kTensorFields, n = int32_t(std::size(kTensorFields)), bytes = sizeof(mhc_tensor);
  else if (struct_name != nullptr && std::strcmp(struct_name, "mhc_options") == 0)
    fields = kOptionsFields, n = int32_t(std::size(kOptionsFields)), bytes = sizeof(mhc_options);
  if (count != nullptr) *count = n;
  if (size != nullptr) *size = bytes;
  return fields;
}

}  // extern "C"
