/* aclnnop/aclnn_mhc_pre_sinkhorn_backward.h: MhcPreSinkhornBackward, CANN's
 * fused MhcSinkhornBackward and MhcPreBackward, two-phase aclnn interface.
 * Definition: SPEC.md §12 (with §3, §10); codes, check order and lifecycle: §7
 * and docs/aclnn.md. The outputs are const aclTensor *, as CANN declares them. */
#ifndef MHC_ACLNN_MHC_PRE_SINKHORN_BACKWARD_H_
#define MHC_ACLNN_MHC_PRE_SINKHORN_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   gradHin [..,D] (x's dtype), gradHPost [..,N], gradHRes [..,N*N] or
 *   [..,N,N]; x [B,S,N,D] or [T,N,D] bf16/fp16; phi, alpha [3], bias; the
 *   forward's caches hPre, hcBeforeNorm, invRms [..,1], sumOut [2I,..,N],
 *   normOut [2I,..,N,N] (I from their first dim). Outputs gradX (x's shape and
 *   dtype), gradPhi, gradAlpha, gradBias. hcEps must be the forward's; it is
 *   not checked (as in CANN). Empty inputs are accepted: the run does nothing
 *   (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcPreSinkhornBackwardGetWorkspaceSize(
    const aclTensor *gradHin, const aclTensor *gradHPost, const aclTensor *gradHRes, const aclTensor *x,
    const aclTensor *phi, const aclTensor *alpha, const aclTensor *bias, const aclTensor *hPre,
    const aclTensor *hcBeforeNorm, const aclTensor *invRms, const aclTensor *sumOut, const aclTensor *normOut,
    double hcEps, const aclTensor *gradX, const aclTensor *gradPhi, const aclTensor *gradAlpha,
    const aclTensor *gradBias, uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcPreSinkhornBackward(void *workspace, uint64_t workspaceSize,
                                                  aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_SINKHORN_BACKWARD_H_ */
