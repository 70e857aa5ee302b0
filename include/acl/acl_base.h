/* acl/acl_base.h: the base types of Huawei CANN's ACL, for programs written
 * against CANN that run on CPUs through libmhc_aclnn.
 *
 * Names, signatures and numeric values are CANN's (programs and bindings
 * hard-code the numbers). Only what the mHC operators and their callers use is
 * here; see docs/aclnn.md. Usable from C and C++. */
#ifndef MHC_ACL_ACL_BASE_H_
#define MHC_ACL_ACL_BASE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ACL_FUNC_VISIBILITY __declspec(dllexport)
#else
#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;

/* IEEE 754 binary16, as raw bits (CANN's host type for ACL_FLOAT16 data). */
typedef uint16_t aclFloat16;

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;

/* Error codes (CANN's values). */
static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_NONE = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_REPEAT_FINALIZE = 100037;
static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_API_NOT_SUPPORT = 200001;
static const int ACL_ERROR_INVALID_DEVICE = 200002;
static const int ACL_ERROR_INTERNAL_ERROR = 500000;
static const int ACL_ERROR_FAILURE = 500001;
static const int ACL_ERROR_RT_PARAM_INVALID = 107000;
static const int ACL_ERROR_RT_INVALID_DEVICEID = 107001;

typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_STRING = 13,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,      /* private (Ascend-internal tiling) */
  ACL_FORMAT_FRACTAL_Z = 4,    /* private */
  ACL_FORMAT_NC1HWC0_C04 = 12, /* private */
  ACL_FORMAT_HWCN = 16,
  ACL_FORMAT_NDHWC = 27,
  ACL_FORMAT_FRACTAL_NZ = 29,  /* private */
  ACL_FORMAT_NCDHW = 30,
  ACL_FORMAT_NDC1HWC0 = 32,    /* private */
  ACL_FRACTAL_Z_3D = 33,       /* private */
  ACL_FORMAT_NC = 35,
  ACL_FORMAT_NCL = 47
} aclFormat;

/* Bytes per element of dataType (ACL_BOOL 1, ACL_BF16 2, ACL_COMPLEX128 16, ...);
 * 0 for ACL_STRING, ACL_DT_UNDEFINED and any value that is no aclDataType. */
ACL_FUNC_VISIBILITY size_t aclDataTypeSize(aclDataType dataType);

/* float <-> binary16: round to nearest, ties to even; subnormals exact;
 * overflow (|value| >= 65520) gives +-Inf; Inf stays Inf, NaN stays NaN (its
 * payload's top bits kept, so every binary16 value round-trips exactly). */
ACL_FUNC_VISIBILITY aclFloat16 aclFloatToFloat16(float value);
ACL_FUNC_VISIBILITY float aclFloat16ToFloat(aclFloat16 value);

/* The message of the last failure of any acl / aclnn call on this thread
 * ("" when there was none). Valid until the next failure on the same thread. */
ACL_FUNC_VISIBILITY const char *aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif
#endif /* MHC_ACL_ACL_BASE_H_ */
