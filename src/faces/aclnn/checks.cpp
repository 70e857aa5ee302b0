// Checks shared by the aclnn operators: opImplMode (V2) and the NULL checks
// that come before anything else (SPEC §7).
#include <string>

#include "faces/aclnn/face.hpp"

namespace mhc::faces::aclnn {

aclnnStatus check_op_impl_mode(const char* op, int64_t mode) {
  // 0: default, 1: HF32 on Ascend (computed here in full fp32, at least as accurate).
  if (mode != 0 && mode != 1)
    return fail(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": opImplMode must be 0 or 1, got " + std::to_string(mode));
  return ACLNN_SUCCESS;
}

aclnnStatus check_required(const char* op, std::initializer_list<TensorArg> required, const uint64_t* workspace_size,
                           aclOpExecutor* const* executor) {
  for (const TensorArg& arg : required)
    if (arg.tensor == nullptr)
      return fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": " + arg.name + " is NULL (required)");
  if (workspace_size == nullptr) return fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": workspaceSize is NULL");
  if (executor == nullptr) return fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": executor is NULL");
  return ACLNN_SUCCESS;
}

}  // namespace mhc::faces::aclnn
