/* aclnnop/aclnn_mhc_pre.h: MhcPre (forward), CANN's two-phase aclnn interface.
 * Formulas, shapes and dtypes: SPEC.md §2, §4; codes, check order and
 * lifecycle: §7 and docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_PRE_H_
#define MHC_ACLNN_MHC_PRE_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   x [B,S,N,D] or [T,N,D] bf16/fp16; phi [F,N*D], alpha [3] or [2], bias [F],
 *   gammaOptional [N,D] fp32. Outputs hIn [..,D] (x's dtype), hPost [..,N],
 *   hRes [..,N,N] or [..,R] (required with a 3-entry alpha; with a 2-entry
 *   alpha it may be NULL and is left untouched), and the caches invRms [..],
 *   hMix [..,F], hPre [..,N]: all three or none. normEps and hcEps are not
 *   checked (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcPreGetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *bias,
    const aclTensor *gammaOptional, double normEps, double hcEps, aclTensor *hIn, aclTensor *hPost,
    aclTensor *hRes, aclTensor *invRmsOptional, aclTensor *hMixOptional, aclTensor *hPreOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcPre(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                  aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_H_ */
