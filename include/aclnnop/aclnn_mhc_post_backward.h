/* aclnnop/aclnn_mhc_post_backward.h: MhcPostBackward, CANN's two-phase aclnn
 * interface. Formulas: SPEC.md §11; codes, check order and lifecycle: §7 and
 * docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_POST_BACKWARD_H_
#define MHC_ACLNN_MHC_POST_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   gradOutput and x [B,S,N,D] or [T,N,D] bf16/fp16 (the same); hRes [..,N,N]
 *   fp32 (may be NULL: the identity); hOut [..,D] in x's dtype; hPost [..,N]
 *   fp32. Outputs, all required: gradX (x's shape and dtype), gradHRes
 *   [..,N,N] fp32 (written with or without hRes), gradHOut [..,D] in x's
 *   dtype, gradHPost [..,N] fp32. Empty inputs: ACLNN_ERR_PARAM_INVALID. */
ACLNN_API aclnnStatus aclnnMhcPostBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *x,
                                                           const aclTensor *hRes, const aclTensor *hOut,
                                                           const aclTensor *hPost, aclTensor *gradX,
                                                           aclTensor *gradHRes, aclTensor *gradHOut,
                                                           aclTensor *gradHPost, uint64_t *workspaceSize,
                                                           aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcPostBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_POST_BACKWARD_H_ */
