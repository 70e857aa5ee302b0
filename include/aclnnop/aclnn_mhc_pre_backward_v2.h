/* aclnnop/aclnn_mhc_pre_backward_v2.h: MhcPreBackward with opImplMode (0
 * default, 1 HF32 on Ascend; here both compute in full fp32). Otherwise as
 * aclnn_mhc_pre_backward.h. */
#ifndef MHC_ACLNN_MHC_PRE_BACKWARD_V2_H_
#define MHC_ACLNN_MHC_PRE_BACKWARD_V2_H_

#include "acl/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMhcPreBackwardV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *gradHIn,
    const aclTensor *gradHPost, const aclTensor *gradHRes, const aclTensor *invRms,
    const aclTensor *hMix, const aclTensor *hPre, const aclTensor *hPost,
    const aclTensor *gammaOptional, const aclTensor *gradXPostOptional, float hcEps,
    int64_t opImplMode, aclTensor *gradX, aclTensor *gradPhi, aclTensor *gradAlpha,
    aclTensor *gradBias, aclTensor *gradGamma, uint64_t *workspaceSize, aclOpExecutor **executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnMhcPreBackwardV2(void *workspace, uint64_t workspaceSize,
                                                      aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_BACKWARD_V2_H_ */
