/* aclnnop/aclnn_mhc_pre_backward.h: MhcPreBackward, CANN's two-phase aclnn
 * interface. Formulas: SPEC.md §3; codes, check order and lifecycle: §7,
 * docs/aclnn.md. The outputs are const aclTensor *, as CANN declares them. */
#ifndef MHC_ACLNN_MHC_PRE_BACKWARD_H_
#define MHC_ACLNN_MHC_PRE_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success). gradHRes is required with a 3-entry
 * alpha; with a 2-entry alpha it may be NULL and is not read. gradGamma is
 * required when gammaOptional is given and ignored (not written) when it is
 * not. hcEps is not checked (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcPreBackwardGetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *gradHIn,
    const aclTensor *gradHPost, const aclTensor *gradHRes, const aclTensor *invRms, const aclTensor *hMix,
    const aclTensor *hPre, const aclTensor *hPost, const aclTensor *gammaOptional,
    const aclTensor *gradXPostOptional, float hcEps, const aclTensor *gradX, const aclTensor *gradPhi,
    const aclTensor *gradAlpha, const aclTensor *gradBias, const aclTensor *gradGamma, uint64_t *workspaceSize,
    aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcPreBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_BACKWARD_H_ */
