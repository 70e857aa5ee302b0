/* aclnnop/aclnn_mhc_pre_v2.h: MhcPre with opImplMode: 0 fp32, 1 HF32 (the
 * operands of the matrix product rounded to HF32 as Ascend's matrix unit
 * does, SPEC §7); any other value gives ACLNN_ERR_PARAM_INVALID. Otherwise as
 * aclnn_mhc_pre.h. */
#ifndef MHC_ACLNN_MHC_PRE_V2_H_
#define MHC_ACLNN_MHC_PRE_V2_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnMhcPreV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *bias,
    const aclTensor *gammaOptional, double normEps, double hcEps, int64_t opImplMode, aclTensor *hIn,
    aclTensor *hPost, aclTensor *hRes, aclTensor *invRmsOptional, aclTensor *hMixOptional,
    aclTensor *hPreOptional, uint64_t *workspaceSize, aclOpExecutor **executor);

ACLNN_API aclnnStatus aclnnMhcPreV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_V2_H_ */
