/* aclnnop/aclnn_mhc_sinkhorn.h: MhcSinkhorn, CANN's two-phase aclnn interface.
 * Formulas and caches: SPEC.md §10; codes, check order and lifecycle: §7 and
 * docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_SINKHORN_H_
#define MHC_ACLNN_MHC_SINKHORN_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   x [B,S,N,N] or [T,N,N] fp32, any N >= 1, not empty; output x's shape, fp32;
 *   1 <= numIters <= 100. The caches normOut (2*I*T*N*Na floats) and sumOut
 *   (2*I*T*Na floats), Na = 8*ceil(N/8), I = numIters, T the tokens: any shape
 *   of that element count, contiguous fp32, in this library's layout (only
 *   aclnnMhcSinkhornBackward reads them). Both NULL, or both of one element:
 *   no caches; one cache and one not: ACLNN_ERR_PARAM_INVALID. eps is not
 *   checked (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcSinkhornGetWorkspaceSize(const aclTensor *x, float eps, int64_t numIters,
                                                       aclTensor *output, aclTensor *normOut, aclTensor *sumOut,
                                                       uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcSinkhorn(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                       aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_SINKHORN_H_ */
