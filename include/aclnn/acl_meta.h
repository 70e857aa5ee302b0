/* aclnn/acl_meta.h: CANN's header of tensors and executors; its declarations
 * are those of aclnn/aclnn_base.h. */
#ifndef MHC_ACLNN_ACL_META_H_
#define MHC_ACLNN_ACL_META_H_
#include "aclnn/aclnn_base.h"
#endif /* MHC_ACLNN_ACL_META_H_ */
