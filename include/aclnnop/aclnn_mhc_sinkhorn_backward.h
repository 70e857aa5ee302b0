/* aclnnop/aclnn_mhc_sinkhorn_backward.h: MhcSinkhornBackward, CANN's two-phase
 * aclnn interface. Formulas and caches: SPEC.md §10; codes, check order and
 * lifecycle: §7 and docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_SINKHORN_BACKWARD_H_
#define MHC_ACLNN_MHC_SINKHORN_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   gradOutput [B,S,N,N] or [T,N,N] fp32; out gradOutput's shape, fp32;
 *   normOut and sumOut the caches aclnnMhcSinkhorn wrote (any shape, contiguous
 *   fp32): the iteration count I is numel(normOut) / (2*T*N*Na), which must
 *   divide exactly and agree with numel(sumOut) = 2*I*T*Na. An empty
 *   gradOutput is accepted: the run does nothing (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcSinkhornBackwardGetWorkspaceSize(const aclTensor *gradOutput,
                                                               const aclTensor *normOut, const aclTensor *sumOut,
                                                               aclTensor *out, uint64_t *workspaceSize,
                                                               aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcSinkhornBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                               aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_SINKHORN_BACKWARD_H_ */
