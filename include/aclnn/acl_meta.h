/* CANN's operator headers include <aclnn/acl_meta.h>; ours live in acl/. */
#ifndef MHC_ACLNN_ACL_META_SHIM_H_
#define MHC_ACLNN_ACL_META_SHIM_H_
#include "acl/acl_meta.h"
#endif
