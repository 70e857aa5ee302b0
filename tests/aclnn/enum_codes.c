/* C callers may pass any int for an enum parameter (C enums are ints): these
 * helpers pass codes outside CANN's enumerators, which C++ test code could not
 * write without undefined behaviour (test_concurrency.cpp, AclnnEnums;
 * test_acl_base.cpp). Including every header here also compiles them as C. */
#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "aclnn/aclnn_base.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnnop/aclnn_mhc_pre_backward_v2.h"
#include "aclnnop/aclnn_mhc_pre_v2.h"

aclTensor *mhc_test_tensor_with_codes(const int64_t *dims, uint64_t rank, int dtype, int format, void *data) {
  return aclCreateTensor(dims, rank, (aclDataType)dtype, NULL, 0, (aclFormat)format, dims, rank, data);
}

aclError mhc_test_memcpy_with_kind(void *dst, size_t dest_max, const void *src, size_t count, int kind) {
  return aclrtMemcpy(dst, dest_max, src, count, (aclrtMemcpyKind)kind);
}

size_t mhc_test_data_type_size(int dtype) { return aclDataTypeSize((aclDataType)dtype); }
