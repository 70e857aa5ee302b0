/* mhc C API: the stable ABI under the Python package and any other binding.
 * The operators and their rules are those of the C++ face (mhc.hpp) and docs/SPEC.md.
 *
 * A tensor is a non-owning view: data pointer, dtype, rank, shape and strides
 * in elements. Optional tensors are passed as NULL. Every call returns one of
 * the status codes below; on failure mhc_last_error() gives a message naming
 * the tensor (thread-local, valid until the next call on the same thread) and
 * no output has been written. */
#ifndef MHC_MHC_H_
#define MHC_MHC_H_

#include <stdint.h>

#if defined(_WIN32)
#define MHC_API __declspec(dllexport)
#else
#define MHC_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MHC_MAX_RANK 8
/* The most elements of any operand and of every product of dims the operators
   form (2^44): larger calls are rejected before anything is allocated. */
#define MHC_MAX_ELEMENTS 17592186044416

typedef enum mhc_dtype { MHC_BF16 = 0, MHC_FP16 = 1, MHC_FP32 = 2 } mhc_dtype;

/* Status codes: the numeric values of CANN's aclnn codes. */
#define MHC_OK 0
#define MHC_ERR_NULLPTR 161001
#define MHC_ERR_INVALID 161002
#define MHC_ERR_RUNTIME 361001
#define MHC_ERR_INTERNAL 561001

/* What kind of input error it was, for bindings that map errors to their
 * own exception types (Python: dtype -> TypeError, the rest -> ValueError). */
typedef enum mhc_error_kind {
  MHC_ERROR_NONE = 0,
  MHC_ERROR_NULL = 1,
  MHC_ERROR_DTYPE = 2,
  MHC_ERROR_SHAPE = 3,
  MHC_ERROR_LAYOUT = 4, /* strides, alignment, overlap */
  MHC_ERROR_VALUE = 5,  /* a scalar argument */
  MHC_ERROR_RUNTIME = 6
} mhc_error_kind;

typedef struct mhc_tensor {
  void *data;
  int32_t dtype; /* mhc_dtype */
  int32_t rank;
  int64_t shape[MHC_MAX_RANK];
  int64_t strides[MHC_MAX_RANK]; /* in elements */
} mhc_tensor;

/* Kernel families. MHC_ISA_DEFAULT: the process default (mhc_set_isa, else MHC_ISA, else the best this CPU runs).
   Best first: on x86-64 AMX, AVX512, AVX2; on aarch64 SVE2, SVE, NEON; then PORTABLE, REFERENCE (the
   values are not in that order: mhc_available_isas() lists the families best first). */
typedef enum mhc_isa_id {
  MHC_ISA_DEFAULT = 0, MHC_ISA_AMX = 1, MHC_ISA_AVX512 = 2, MHC_ISA_AVX2 = 3,
  MHC_ISA_PORTABLE = 4, MHC_ISA_REFERENCE = 5,
  MHC_ISA_SVE2 = 6, MHC_ISA_SVE = 7, MHC_ISA_NEON = 8
} mhc_isa_id;

/* The operands of the matrix products (SPEC §7): fp32, or rounded to HF32 first
   (CANN's opImplMode 1, torch_npu's inner_precise=1). */
typedef enum mhc_matmul_precision { MHC_MATMUL_FP32 = 0, MHC_MATMUL_HF32 = 1 } mhc_matmul_precision;

/* Start from mhc_default_options(): it sets struct_size, which lets the struct grow
   without breaking callers built against a shorter one (fields past a caller's
   struct_size take their defaults). A struct_size smaller than this first version's
   is MHC_ERR_INVALID. */
typedef struct mhc_options {
  uint32_t struct_size;     /* sizeof(mhc_options) as the caller compiled it */
  double norm_eps;          /* default 1e-6 */
  double hc_eps;            /* default 1e-6 */
  int32_t num_threads;      /* 0: MHC_NUM_THREADS or all hardware threads */
  int32_t isa;              /* mhc_isa_id; MHC_ISA_DEFAULT unless a call wants one family */
  int32_t matmul_precision; /* mhc_matmul_precision; default MHC_MATMUL_FP32 */
  /* Weights prepared once (mhc_prepare_pre), for the calls that run MhcPre's forward
     (pre, pre_sinkhorn, pre_single_pass and post_pre forwards; any other is
     MHC_ERR_INVALID). Such a call passes the very views the handle was made from as
     phi, alpha, bias, gamma. NULL: none. */
  const struct mhc_prepared_pre *prepared;
} mhc_options;

MHC_API mhc_options mhc_default_options(void);

/* Constant pre weights prepared once (SPEC §2's phi, alpha, bias, gamma): the forms
   the kernel families make of them at every call (phi rounded to HF32, the AMX
   family's packed phi.gamma) made at a call's first use and kept. The handle reads
   the views' memory at every call: it must outlive the handle, unchanged (prepare
   again after changing it). A call's outputs are bitwise those of the same call
   without the handle. Thread-safe: one handle may serve calls on many threads. */
typedef struct mhc_prepared_pre mhc_prepared_pre;
MHC_API int mhc_prepare_pre(const mhc_tensor *phi, const mhc_tensor *alpha, const mhc_tensor *bias,
                            const mhc_tensor *gamma /* nullable */, mhc_prepared_pre **prepared);
MHC_API void mhc_prepared_free(mhc_prepared_pre *prepared); /* NULL: nothing */

MHC_API int mhc_pre_forward(const mhc_tensor *x, const mhc_tensor *phi, const mhc_tensor *alpha,
                            const mhc_tensor *bias, const mhc_tensor *gamma /* nullable */,
                            const mhc_tensor *h_in,
                            const mhc_tensor *h_post /* required unless alpha has 1 entry (the head) */,
                            const mhc_tensor *h_res /* required iff alpha has 3 entries */,
                            const mhc_tensor *inv_rms, const mhc_tensor *h_mix,
                            const mhc_tensor *h_pre /* caches: all three or none */,
                            const mhc_options *options /* nullable: defaults */);

MHC_API int mhc_pre_backward(const mhc_tensor *x, const mhc_tensor *phi, const mhc_tensor *alpha,
                             const mhc_tensor *grad_h_in,
                             const mhc_tensor *grad_h_post /* required unless alpha has 1 entry */,
                             const mhc_tensor *grad_h_res /* required iff alpha has 3 entries */,
                             const mhc_tensor *inv_rms, const mhc_tensor *h_mix,
                             const mhc_tensor *h_pre, const mhc_tensor *h_post /* required unless alpha has 1 entry */,
                             const mhc_tensor *gamma /* nullable */,
                             const mhc_tensor *grad_x_post /* nullable */,
                             const mhc_tensor *grad_x, const mhc_tensor *grad_phi,
                             const mhc_tensor *grad_alpha, const mhc_tensor *grad_bias,
                             const mhc_tensor *grad_gamma /* required iff gamma given */,
                             const mhc_options *options /* nullable: defaults */);

/* MhcSinkhorn (SPEC §10). norm_out, sum_out: both or neither (see mhc.hpp for their layout). */
MHC_API int mhc_sinkhorn_forward(const mhc_tensor *z, double eps, int64_t num_iters, const mhc_tensor *h_res,
                                 const mhc_tensor *norm_out /* nullable */, const mhc_tensor *sum_out /* nullable */,
                                 const mhc_options *options /* nullable: defaults */);
/* From the caches (z NULL), or from z alone with the forward's eps and num_iters (caches NULL). */
MHC_API int mhc_sinkhorn_backward(const mhc_tensor *grad_h_res, const mhc_tensor *norm_out /* nullable */,
                                  const mhc_tensor *sum_out /* nullable */, const mhc_tensor *z /* nullable */,
                                  double eps, int64_t num_iters, const mhc_tensor *grad_z,
                                  const mhc_options *options /* nullable: defaults */);
/* MhcPost (SPEC §11); h_res NULL: the identity. */
MHC_API int mhc_post_forward(const mhc_tensor *x, const mhc_tensor *h_res /* nullable */, const mhc_tensor *h_out,
                             const mhc_tensor *h_post, const mhc_tensor *out,
                             const mhc_options *options /* nullable: defaults */);
/* grad_x in x's dtype or fp32; grad_h_res written whenever given. */
MHC_API int mhc_post_backward(const mhc_tensor *grad_out, const mhc_tensor *x, const mhc_tensor *h_res /* nullable */,
                              const mhc_tensor *h_out, const mhc_tensor *h_post, const mhc_tensor *grad_x,
                              const mhc_tensor *grad_h_res /* nullable */, const mhc_tensor *grad_h_out,
                              const mhc_tensor *grad_h_post, const mhc_options *options /* nullable: defaults */);
/* MhcPreSinkhorn (SPEC §12); the five caches all or none; the Sinkhorn's eps is options->hc_eps. */
MHC_API int mhc_pre_sinkhorn_forward(const mhc_tensor *x, const mhc_tensor *phi, const mhc_tensor *alpha,
                                     const mhc_tensor *bias, int64_t num_iters, const mhc_tensor *h_in,
                                     const mhc_tensor *h_post, const mhc_tensor *h_res,
                                     const mhc_tensor *inv_rms, const mhc_tensor *h_mix, const mhc_tensor *h_pre,
                                     const mhc_tensor *norm_out, const mhc_tensor *sum_out,
                                     const mhc_options *options /* nullable: defaults */);
MHC_API int mhc_pre_sinkhorn_backward(const mhc_tensor *grad_h_in, const mhc_tensor *grad_h_post,
                                      const mhc_tensor *grad_h_res, const mhc_tensor *x, const mhc_tensor *phi,
                                      const mhc_tensor *alpha, const mhc_tensor *bias, const mhc_tensor *h_pre,
                                      const mhc_tensor *h_mix, const mhc_tensor *inv_rms,
                                      const mhc_tensor *sum_out, const mhc_tensor *norm_out,
                                      const mhc_tensor *grad_x, const mhc_tensor *grad_phi,
                                      const mhc_tensor *grad_alpha, const mhc_tensor *grad_bias,
                                      const mhc_options *options /* nullable: defaults */);

/* MhcPreSinglePass (SPEC §14). pre_mix NULL: the first site (h_in = stream 0). */
MHC_API int mhc_pre_single_pass_forward(const mhc_tensor *x, const mhc_tensor *phi, const mhc_tensor *alpha,
                                        const mhc_tensor *bias, const mhc_tensor *gamma /* nullable */,
                                        const mhc_tensor *pre_mix /* nullable */, double sinkhorn_eps,
                                        int64_t num_iters, const mhc_tensor *h_in, const mhc_tensor *h_pre,
                                        const mhc_tensor *h_post, const mhc_tensor *h_res,
                                        const mhc_tensor *inv_rms, const mhc_tensor *h_mix,
                                        const mhc_options *options /* nullable: defaults */);
MHC_API int mhc_pre_single_pass_backward(
    const mhc_tensor *x, const mhc_tensor *phi, const mhc_tensor *alpha, const mhc_tensor *bias,
    const mhc_tensor *gamma /* nullable */, const mhc_tensor *pre_mix /* nullable */, const mhc_tensor *grad_h_in,
    const mhc_tensor *grad_h_pre /* nullable */, const mhc_tensor *grad_h_post, const mhc_tensor *grad_h_res,
    const mhc_tensor *inv_rms, const mhc_tensor *h_mix, const mhc_tensor *h_pre, const mhc_tensor *h_post,
    const mhc_tensor *grad_x_post /* nullable */, double sinkhorn_eps, int64_t num_iters, const mhc_tensor *grad_x,
    const mhc_tensor *grad_pre_mix /* nullable; needs pre_mix */, const mhc_tensor *grad_phi,
    const mhc_tensor *grad_alpha, const mhc_tensor *grad_bias, const mhc_tensor *grad_gamma /* iff gamma */,
    const mhc_options *options /* nullable: defaults */);
/* MhcCollapse (SPEC §14) and its backward. */
MHC_API int mhc_collapse_forward(const mhc_tensor *x, const mhc_tensor *pre_mix, const mhc_tensor *h,
                                 const mhc_options *options /* nullable: defaults */);
MHC_API int mhc_collapse_backward(const mhc_tensor *grad_h, const mhc_tensor *x, const mhc_tensor *pre_mix,
                                  const mhc_tensor *grad_x, const mhc_tensor *grad_pre_mix,
                                  const mhc_options *options /* nullable: defaults */);

/* MhcPostPre (SPEC §15): MhcPost of site s then site s+1's pre on x_next;
   single_pass 0: V4 (pre_mix NULL), 1: V4.1. */
MHC_API int mhc_post_pre_forward(const mhc_tensor *x, const mhc_tensor *h_res /* nullable */,
                                 const mhc_tensor *h_out, const mhc_tensor *h_post, const mhc_tensor *phi,
                                 const mhc_tensor *alpha, const mhc_tensor *bias,
                                 const mhc_tensor *gamma /* nullable */, const mhc_tensor *pre_mix /* nullable */,
                                 int64_t single_pass, double sinkhorn_eps, int64_t num_iters,
                                 const mhc_tensor *x_next, const mhc_tensor *h_in, const mhc_tensor *h_pre,
                                 const mhc_tensor *h_post_next, const mhc_tensor *h_res_next,
                                 const mhc_tensor *inv_rms, const mhc_tensor *h_mix,
                                 const mhc_options *options /* nullable: defaults */);
MHC_API int mhc_post_pre_backward(
    const mhc_tensor *x, const mhc_tensor *h_res /* nullable */, const mhc_tensor *h_out, const mhc_tensor *h_post,
    const mhc_tensor *phi, const mhc_tensor *alpha, const mhc_tensor *bias, const mhc_tensor *gamma /* nullable */,
    const mhc_tensor *pre_mix /* nullable */, const mhc_tensor *x_next, const mhc_tensor *grad_x_next /* nullable */,
    const mhc_tensor *grad_h_in, const mhc_tensor *grad_h_pre /* nullable */, const mhc_tensor *grad_h_post_next,
    const mhc_tensor *grad_h_res_next, const mhc_tensor *inv_rms, const mhc_tensor *h_mix, const mhc_tensor *h_pre,
    const mhc_tensor *h_post_next, int64_t single_pass, double sinkhorn_eps, int64_t num_iters,
    const mhc_tensor *grad_x, const mhc_tensor *grad_h_res /* nullable */, const mhc_tensor *grad_h_out,
    const mhc_tensor *grad_h_post, const mhc_tensor *grad_pre_mix /* nullable */, const mhc_tensor *grad_phi,
    const mhc_tensor *grad_alpha, const mhc_tensor *grad_bias, const mhc_tensor *grad_gamma /* iff gamma */,
    const mhc_options *options /* nullable: defaults */);

/* The site backward (SPEC §15) in two steps around the sub-layer's backward, no fp32
   grad_x between them. prepare: MhcPostBackward without grad_x. finish: the site's pre
   backward (single_pass 0: V4, pre_mix NULL; 1: V4.1) with the post's grad_x formed
   from h_res and grad_x_next (NULL: none); grad_x must not overlap grad_x_next. */
MHC_API int mhc_site_backward_prepare(const mhc_tensor *grad_x_next, const mhc_tensor *x,
                                      const mhc_tensor *h_res /* nullable */, const mhc_tensor *h_out,
                                      const mhc_tensor *h_post, const mhc_tensor *grad_h_res /* nullable */,
                                      const mhc_tensor *grad_h_out, const mhc_tensor *grad_h_post,
                                      const mhc_options *options /* nullable: defaults */);
MHC_API int mhc_site_backward_finish(
    const mhc_tensor *x, const mhc_tensor *phi, const mhc_tensor *alpha, const mhc_tensor *bias,
    const mhc_tensor *gamma /* nullable */, const mhc_tensor *pre_mix /* nullable */,
    const mhc_tensor *h_res /* nullable */, const mhc_tensor *grad_x_next /* nullable */,
    const mhc_tensor *grad_h_in, const mhc_tensor *grad_h_pre /* nullable */, const mhc_tensor *grad_h_post,
    const mhc_tensor *grad_h_res, const mhc_tensor *inv_rms, const mhc_tensor *h_mix, const mhc_tensor *h_pre,
    const mhc_tensor *h_post, int64_t single_pass, double sinkhorn_eps, int64_t num_iters,
    const mhc_tensor *grad_x, const mhc_tensor *grad_pre_mix /* nullable */, const mhc_tensor *grad_phi,
    const mhc_tensor *grad_alpha, const mhc_tensor *grad_bias, const mhc_tensor *grad_gamma /* iff gamma */,
    const mhc_options *options /* nullable: defaults */);

/* MhcRmsNorm (SPEC §16): the engines' RMSNorm of h_in; weight in x's dtype or fp32. */
MHC_API int mhc_rms_norm_forward(const mhc_tensor *x, const mhc_tensor *weight, double eps, const mhc_tensor *y,
                                 const mhc_options *options /* nullable: defaults */);

/* What each operator function above takes, in order, for bindings that build their
   prototypes at run time (the Python package does); made from the same description
   (src/description/operators.def) as the functions themselves. */
typedef enum mhc_arg_kind {
  MHC_ARG_TENSOR_IN = 0,  /* const mhc_tensor *, read */
  MHC_ARG_TENSOR_OUT = 1, /* const mhc_tensor *, written */
  MHC_ARG_DOUBLE = 2,
  MHC_ARG_INT64 = 3
} mhc_arg_kind;
typedef struct mhc_arg_desc {
  const char *name;
  int32_t kind;       /* mhc_arg_kind */
  int32_t nullable;   /* 1: NULL accepted (when it may be absent is the operator's rule) */
  const char *dtypes; /* "bf16|fp16|fp32", "fp32", "x" (x's dtype), "x|fp32"; "" for scalars */
  const char *shape;  /* SPEC's symbols, ".." the token dims ([B,S] or [T]), "|" alternatives */
} mhc_arg_desc;
typedef struct mhc_operator_desc {
  const char *name;      /* the function is mhc_<name> */
  const char *spec;      /* SPEC sections */
  const char *cann;      /* CANN's aclnn operator */
  const char *torch_npu; /* torch_npu's (or CANN's torch extension's) function */
  int32_t num_args;      /* the trailing const mhc_options * not counted */
  const mhc_arg_desc *args;
} mhc_operator_desc;
MHC_API const mhc_operator_desc *mhc_operators(int32_t *count);
/* The operators a torch binding registers with its dispatcher (torch.ops.mhc.<name>), each with
   its schema and the operator above it runs on (its name without mhc_). */
typedef struct mhc_torch_op {
  const char *name;
  const char *op;
  const char *schema;
} mhc_torch_op;
MHC_API const mhc_torch_op *mhc_torch_ops(int32_t *count);

/* Every constant of this header by name without its MHC_ prefix ("BF16", "ERR_INVALID",
   "ISA_AVX2", "MAX_RANK", ...), and the fields of its structs, for the same bindings. */
typedef struct mhc_constant {
  const char *name;
  int64_t value;
} mhc_constant;
MHC_API const mhc_constant *mhc_constants(int32_t *count);
typedef enum mhc_field_kind { MHC_FIELD_POINTER = 0, MHC_FIELD_INT32 = 1, MHC_FIELD_UINT32 = 2,
                              MHC_FIELD_INT64 = 3, MHC_FIELD_DOUBLE = 4 } mhc_field_kind;
typedef struct mhc_field_desc {
  const char *name;
  int32_t kind;   /* mhc_field_kind */
  int32_t count;  /* 1, or an array's length */
  int64_t offset; /* in bytes */
} mhc_field_desc;
/* "mhc_tensor" or "mhc_options"; NULL for any other name. *size: sizeof the struct. */
MHC_API const mhc_field_desc *mhc_struct_fields(const char *struct_name, int32_t *count, int64_t *size);

/* The message and kind of the last failure on this thread ("" / NONE after success). */
MHC_API const char *mhc_last_error(void);
MHC_API int mhc_last_error_kind(void);

/* Sets the process default kernel family by name ("amx", "avx512", "avx2", "sve2", "sve", "neon", "portable",
   "reference");
   NULL or "" goes back to MHC_ISA / the best this CPU runs. A name that is unknown, or a family this
   build or CPU cannot run: MHC_ERR_INVALID (mhc_last_error says which families are available), default unchanged. */
MHC_API int mhc_set_isa(const char *name);
/* The process default's name. */
MHC_API const char *mhc_isa(void);
/* 1 if this build and CPU run the named family, else 0. */
MHC_API int mhc_isa_available(const char *name);
/* The families this build and CPU run, best first, comma-separated ("avx2,portable,reference"). */
MHC_API const char *mhc_available_isas(void);
MHC_API const char *mhc_version(void);

#ifdef __cplusplus
}
#endif
#endif /* MHC_MHC_H_ */
