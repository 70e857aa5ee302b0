/* aclnnop/aclnn_mhc_pre_sinkhorn.h: MhcPreSinkhorn, CANN's fused MhcPre and
 * MhcSinkhorn, two-phase aclnn interface. Definition: SPEC.md §12 (with §2,
 * §10); codes, check order and lifecycle: §7 and docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_PRE_SINKHORN_H_
#define MHC_ACLNN_MHC_PRE_SINKHORN_H_

#include "aclnn/aclnn_base.h"

#ifndef __cplusplus
#include <stdbool.h> /* needBackward is a bool, as in CANN */
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   x [B,S,N,D] or [T,N,D] bf16/fp16; phi [2N+N*N, N*D], alpha [3], bias
 *   [2N+N*N] fp32; hcMult equal to x's N; 1 <= numIters <= 100. Outputs hIn
 *   [..,D] (x's dtype), hPost [..,N], hRes [..,N*N] or [..,N,N] (the doubly
 *   stochastic H), and with needBackward the backward's caches hPre [..,N],
 *   hcBeforeNorm [..,2N+N*N] (MhcPre's h_mix), invRms [..,1], sumOut
 *   [2*numIters,..,N], normOut [2*numIters,..,N,N] (contiguous): required
 *   then, not looked at (and not written) without it. hcEps (also the
 *   Sinkhorn's eps) and normEps are not checked (as in CANN). Empty inputs are
 *   accepted: the run does nothing (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcPreSinkhornGetWorkspaceSize(
    const aclTensor *x, const aclTensor *phi, const aclTensor *alpha, const aclTensor *bias, int64_t hcMult,
    int64_t numIters, double hcEps, double normEps, bool needBackward, aclTensor *hIn, aclTensor *hPost,
    aclTensor *hRes, aclTensor *hPre, aclTensor *hcBeforeNorm, aclTensor *invRms, aclTensor *sumOut,
    aclTensor *normOut, uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcPreSinkhorn(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_PRE_SINKHORN_H_ */
