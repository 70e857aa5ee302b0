/* acl/acl_meta.h: tensors, executors and aclnn status codes; the declarations
 * live in aclnn/aclnn_base.h, where CANN's operator headers find them. */
#ifndef MHC_ACL_ACL_META_H_
#define MHC_ACL_ACL_META_H_
#include "aclnn/aclnn_base.h"
#endif /* MHC_ACL_ACL_META_H_ */
