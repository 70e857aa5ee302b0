/* acl/acl.h: the entry header of CANN's ACL, served on CPUs by libmhc_aclnn.
 * See docs/aclnn.md for what is supported and what differs from CANN. */
#ifndef MHC_ACL_ACL_H_
#define MHC_ACL_ACL_H_

#include "acl/acl_base.h"
#include "acl/acl_rt.h"
#include "aclnn/aclnn_base.h" /* tensors and executors (CANN keeps them there) */

#ifdef __cplusplus
extern "C" {
#endif

/* configPath may be NULL; a given file is not read. A second aclInit without
 * aclFinalize gives ACL_ERROR_REPEAT_INITIALIZE, as in CANN. */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACL_ACL_H_ */
