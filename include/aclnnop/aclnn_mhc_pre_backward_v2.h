/* aclnnop/aclnn_mhc_pre_backward_v2.h: MhcPreBackward with opImplMode: 0
 * fp32, 1 HF32 (the operands of the matrix products rounded to HF32, SPEC
 * §7); any other value gives ACLNN_ERR_PARAM_INVALID. Otherwise as
 * aclnn_mhc_pre_backward.h. */
#ifndef MHC_ACLNN_MHC_PRE_BACKWARD_V2_H_
#define MHC_ACLNN_MHC_PRE_BACKWARD_V2_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnMhcPreBackwardV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *gradHIn,
    const aclTensor *gradHPost, const aclTensor *gradHRes, const aclTensor *invRms, const aclTensor *hMix,
    const aclTensor *hPre, const aclTensor *hPost, const aclTensor *gammaOptional,
    const aclTensor *gradXPostOptional, float hcEps, int64_t opImplMode, const aclTensor *gradX,
    const aclTensor *gradPhi, const aclTensor *gradAlpha, const aclTensor *gradBias, const aclTensor *gradGamma,
    uint64_t *workspaceSize, aclOpExecutor **executor);

ACLNN_API aclnnStatus aclnnMhcPreBackwardV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_BACKWARD_V2_H_ */
