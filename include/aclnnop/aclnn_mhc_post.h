/* aclnnop/aclnn_mhc_post.h: MhcPost, CANN's two-phase aclnn interface.
 * Formulas, shapes and dtypes: SPEC.md §11; codes, check order and lifecycle:
 * §7 and docs/aclnn.md. */
#ifndef MHC_ACLNN_MHC_POST_H_
#define MHC_ACLNN_MHC_POST_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase 1: checks every argument and writes nothing but *workspaceSize and
 * *executor (and those only on success).
 *   x [B,S,N,D] or [T,N,D] bf16/fp16; hRes [..,N,N] fp32 (may be NULL: out =
 *   x + hPost hOut); hOut [..,D] in x's dtype; hPost [..,N] fp32. Output out:
 *   x's shape and dtype, out[j] = hPost[j] hOut + sum_i hRes[i,j] x[i] (hRes
 *   transposed). Empty inputs are accepted: the run does nothing (as in CANN). */
ACLNN_API aclnnStatus aclnnMhcPostGetWorkspaceSize(const aclTensor *x, const aclTensor *hRes, const aclTensor *hOut,
                                                   const aclTensor *hPost, aclTensor *out, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor);

/* Phase 2: runs (synchronously) and frees the executor. */
ACLNN_API aclnnStatus aclnnMhcPost(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACLNN_MHC_POST_H_ */
