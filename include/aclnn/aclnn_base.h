/* aclnn/aclnn_base.h: the aclnn base of CANN, which CANN's operator headers
 * (aclnnop/aclnn_*.h) include: aclnnStatus and its codes, aclTensor,
 * aclOpExecutor, tensor creation. Signatures and numeric values are CANN's.
 * acl/acl_meta.h and aclnn/acl_meta.h include this header. */
#ifndef MHC_ACLNN_ACLNN_BASE_H_
#define MHC_ACLNN_ACLNN_BASE_H_

#include "acl/acl_base.h"

/* The export mark of the aclnn functions, spelled as CANN's operator headers
 * spell it (so their own definition of it is an identical redefinition). */
#ifndef ACLNN_API
#if defined(_WIN32)
#define ACLNN_API __declspec(dllexport)
#else
#define ACLNN_API __attribute__((visibility("default")))
#endif
#endif

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
#endif /* MHC_ACLNN_ACLNN_BASE_H_ */
