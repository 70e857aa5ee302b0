/* acl/acl_meta.h: the aclnn base of CANN (aclnn/acl_meta.h there): tensors,
 * executors, aclnn status codes. Signatures and numeric values are CANN's. */
#ifndef MHC_ACL_ACL_META_H_
#define MHC_ACL_ACL_META_H_

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t aclnnStatus;

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000

typedef struct aclTensor aclTensor;
typedef struct aclOpExecutor aclOpExecutor;

/* A view of memory: viewDims/stride/offset (in elements) say which elements,
 * storageDims the extent of the memory at tensorData. The arrays are copied.
 * NULL stride means contiguous. Returns NULL (with aclGetRecentErrMsg) on a
 * NULL dims array with a non-zero count or a negative dim. */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
                                               aclDataType dataType, const int64_t *stride,
                                               int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum,
                                               void *tensorData);
/* Tensors may be destroyed right after GetWorkspaceSize: executors keep no
 * reference to them. Destroying NULL is a no-op; an unknown pointer is an error. */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor);

/* Frees an executor that was not run (running frees it). NULL is a no-op; an
 * executor already run or destroyed gives ACLNN_ERR_PARAM_INVALID. */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACL_ACL_META_H_ */
