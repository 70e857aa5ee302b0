/* aclnnop/aclnn_mhc_pre_backward.h: MhcPreBackward, CANN's two-phase aclnn
 * interface. Formulas: SPEC.md §3; codes and lifecycle: §7, docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_PRE_BACKWARD_H_
#define MHC_ACLNN_MHC_PRE_BACKWARD_H_

#include "acl/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success). gradHRes is NULL iff alpha has 2
 * entries; gradGamma is required when gammaOptional is given and ignored
 * (not written) when it is not. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMhcPreBackwardGetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *gradHIn,
    const aclTensor *gradHPost, const aclTensor *gradHRes, const aclTensor *invRms,
    const aclTensor *hMix, const aclTensor *hPre, const aclTensor *hPost,
    const aclTensor *gammaOptional, const aclTensor *gradXPostOptional, float hcEps,
    aclTensor *gradX, aclTensor *gradPhi, aclTensor *gradAlpha, aclTensor *gradBias,
    aclTensor *gradGamma, uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMhcPreBackward(void *workspace, uint64_t workspaceSize,
                                                    aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_BACKWARD_H_ */
