/* aclnnop/aclnn_mhc_pre_v2.h: MhcPre with opImplMode (0 default, 1 HF32 on
 * Ascend; here both compute in full fp32). Otherwise as aclnn_mhc_pre.h. */
#ifndef MHC_ACLNN_MHC_PRE_V2_H_
#define MHC_ACLNN_MHC_PRE_V2_H_

#include "acl/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMhcPreV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *bias,
    const aclTensor *gammaOptional, double normEps, double hcEps, int64_t opImplMode,
    aclTensor *hIn, aclTensor *hPost, aclTensor *hRes, aclTensor *invRmsOptional,
    aclTensor *hMixOptional, aclTensor *hPreOptional, uint64_t *workspaceSize,
    aclOpExecutor **executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnMhcPreV2(void *workspace, uint64_t workspaceSize,
                                              aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_V2_H_ */
