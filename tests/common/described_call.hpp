// Calls an operator's C function by its name in the description (src/description/
// operators.def), with each tensor argument looked up by name and each scalar asked
// for by name, in the order the description gives: a harness names what it has and
// never spells a prototype (the fuzz targets' C face).
#pragma once

#include <cstdint>
#include <string_view>

#include "mhc/mhc.h"

namespace mhc_test {

// at(name) -> const mhc_tensor* (nullptr: NULL); real(name) -> double; integer(name) -> int64_t.
// *required_null: some argument the description marks required was NULL (the call then
// answers MHC_ERR_NULLPTR). An operator the description does not list: MHC_ERR_INTERNAL.
template <class At, class Real, class Integer>
int call_described(std::string_view op, At&& at, Real&& real, Integer&& integer, const mhc_options* options,
                   bool* required_null) {
#define MHC_TEST_SCALAR_double(arg) real(#arg)
#define MHC_TEST_SCALAR_int64(arg) integer(#arg)
#define MHC_TEST_ARG_TENSOR(role, arg, presence, dtypes, shape) at(#arg),
#define MHC_TEST_ARG_SCALAR(type, arg) MHC_TEST_SCALAR_##type(arg),
#define MHC_TEST_REQUIRED_required(arg) || at(#arg) == nullptr
#define MHC_TEST_REQUIRED_nullable(arg)
#define MHC_TEST_REQUIRED_TENSOR(role, arg, presence, dtypes, shape) MHC_TEST_REQUIRED_##presence(arg)
#define MHC_TEST_NO_SCALAR(type, arg)
#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS)                  \
  if (op == #name) {                                                         \
    *required_null = false ARGS(MHC_TEST_REQUIRED_TENSOR, MHC_TEST_NO_SCALAR); \
    return mhc_##name(ARGS(MHC_TEST_ARG_TENSOR, MHC_TEST_ARG_SCALAR) options); \
  }
#include "description/operators.def"
#undef MHC_OPERATOR
#undef MHC_TEST_SCALAR_double
#undef MHC_TEST_SCALAR_int64
#undef MHC_TEST_ARG_TENSOR
#undef MHC_TEST_ARG_SCALAR
#undef MHC_TEST_REQUIRED_required
#undef MHC_TEST_REQUIRED_nullable
#undef MHC_TEST_REQUIRED_TENSOR
#undef MHC_TEST_NO_SCALAR
  *required_null = false;
  return MHC_ERR_INTERNAL;
}

}  // namespace mhc_test
