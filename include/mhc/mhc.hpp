// mhc: the operators of an mHC layer on CPUs: MhcPre, MhcSinkhorn, MhcPost, CANN's
// fused MhcPreSinkhorn, and their backwards.
//
// The C++ face. Tensors are non-owning views (pointer, dtype, shape, strides in
// elements). Functions return a Status; on any error no output is written and
// the message names the tensor, what was expected and what was given.
// The formulas, shapes and rules are those of docs/SPEC.md.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mhc/mhc.h"

namespace mhc {

enum class DType : int32_t { bf16 = MHC_BF16, fp16 = MHC_FP16, fp32 = MHC_FP32 };

inline constexpr int kMaxRank = MHC_MAX_RANK;

// A non-owning view of a strided tensor. The library reads inputs through it and
// writes outputs through it; it never keeps the pointer after a call returns.
struct MHC_API TensorView {
  void* data = nullptr;
  DType dtype = DType::fp32;
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements

  TensorView() = default;
  // A view with explicit strides (elements).
  TensorView(const void* ptr, DType type, std::initializer_list<int64_t> dims,
             std::initializer_list<int64_t> element_strides);
  // A contiguous (row-major) view.
  TensorView(const void* ptr, DType type, std::initializer_list<int64_t> dims);

  int64_t numel() const;
};

enum class StatusCode : int32_t {
  ok = MHC_OK,
  null_pointer = MHC_ERR_NULLPTR,
  invalid_argument = MHC_ERR_INVALID,
  runtime_error = MHC_ERR_RUNTIME,
  internal_error = MHC_ERR_INTERNAL,
};

enum class ErrorKind : int32_t {
  none = MHC_ERROR_NONE,
  null = MHC_ERROR_NULL,
  dtype = MHC_ERROR_DTYPE,
  shape = MHC_ERROR_SHAPE,
  layout = MHC_ERROR_LAYOUT,
  value = MHC_ERROR_VALUE,
  runtime = MHC_ERROR_RUNTIME,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, ErrorKind kind, std::string message)
      : code_(code), kind_(kind), message_(std::move(message)) {}
  bool ok() const { return code_ == StatusCode::ok; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return code_; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::ok;
  ErrorKind kind_ = ErrorKind::none;
  std::string message_;
};

// Kernel families, best first: x86-64's (amx, avx512, avx2), aarch64's (sve2, sve,
// neon), then portable and reference. `automatic` is the process default: set_isa(),
// else MHC_ISA in the environment, else the best family this build and CPU run.
enum class Isa : int32_t {
  automatic = MHC_ISA_DEFAULT,
  amx = MHC_ISA_AMX,
  avx512 = MHC_ISA_AVX512,
  avx2 = MHC_ISA_AVX2,
  sve2 = MHC_ISA_SVE2,
  sve = MHC_ISA_SVE,
  neon = MHC_ISA_NEON,
  portable = MHC_ISA_PORTABLE,
  reference = MHC_ISA_REFERENCE
};

// The operands of the matrix products (SPEC §7): fp32 (CANN's opImplMode 0), or
// rounded to HF32 first (opImplMode 1, torch_npu's inner_precise=1); the products
// and sums are fp32 either way.
enum class MatmulPrecision : int32_t { fp32 = MHC_MATMUL_FP32, hf32 = MHC_MATMUL_HF32 };

class PreparedPre;

struct Options {
  double norm_eps = 1e-6;
  double hc_eps = 1e-6;
  int num_threads = 0;  // 0: MHC_NUM_THREADS if set, else all hardware threads
  Isa isa = Isa::automatic;  // a family this CPU cannot run is an error naming it
  MatmulPrecision matmul_precision = MatmulPrecision::fp32;
  // Weights prepared once (prepare_pre) for the calls that run MhcPre's forward
  // (pre_forward, pre_sinkhorn_forward, pre_single_pass_forward, post_pre_forward;
  // any other call is an error). The call passes the very views it was made from.
  const PreparedPre* prepared = nullptr;
};

// Constant pre weights prepared once: the forms the kernel families make of phi,
// alpha, bias, gamma at every call (phi rounded to HF32, the AMX family's packed
// phi.gamma), made at a call's first use and kept. It reads the views' memory at
// every call: that must outlive it, unchanged (prepare again after a change).
// Outputs are bitwise those of the same call without it. Thread-safe.
MHC_API Status prepare_pre(const TensorView& phi, const TensorView& alpha, const TensorView& bias,
                           const std::optional<TensorView>& gamma, std::shared_ptr<const PreparedPre>* prepared);

// Forward MhcPre (SPEC §2). x is [B,S,N,D] or [T,N,D]; every per-token tensor
// follows x's layout.
struct PreForwardInputs {
  TensorView x;      // bf16 | fp16 | fp32
  TensorView phi;    // [F, N*D] fp32
  TensorView alpha;  // [3], [2] or [1] (the head) fp32
  TensorView bias;   // [F] fp32
  std::optional<TensorView> gamma;  // [N, D] fp32; absent = ones
};
// A one-entry alpha (phi [N, K], bias [N]) is the head (SPEC §6): only h_in and the
// caches; an h_post or h_res given is left untouched.
struct PreForwardOutputs {
  TensorView h_in;                    // [.., D], x's dtype
  std::optional<TensorView> h_post;   // [.., N] fp32; required unless alpha has 1 entry
  std::optional<TensorView> h_res;    // [.., N, N] or [.., R] fp32; required iff alpha has 3 entries
  std::optional<TensorView> inv_rms;  // [..] fp32      } the three caches:
  std::optional<TensorView> h_mix;    // [.., F] fp32   } all or none
  std::optional<TensorView> h_pre;    // [.., N] fp32   }
};
MHC_API Status pre_forward(const PreForwardInputs& in, const PreForwardOutputs& out,
                   const Options& options = {});

// Backward MhcPreBackward (SPEC §3). With a one-entry alpha (the head) grad_h_post,
// grad_h_res and h_post are not read.
struct PreBackwardInputs {
  TensorView x;
  TensorView phi;
  TensorView alpha;
  TensorView grad_h_in;                    // [.., D], x's dtype
  std::optional<TensorView> grad_h_post;   // [.., N] fp32; required unless alpha has 1 entry
  std::optional<TensorView> grad_h_res;    // [.., N, N] or [.., R]; required iff alpha has 3 entries
  TensorView inv_rms;                      // [..]
  TensorView h_mix;                        // [.., F]
  TensorView h_pre;                        // [.., N]
  std::optional<TensorView> h_post;        // [.., N]; required unless alpha has 1 entry
  std::optional<TensorView> gamma;        // [N, D]
  std::optional<TensorView> grad_x_post;  // x's shape; x's dtype or fp32 (post_backward's grad_x); absent = 0
};
struct PreBackwardOutputs {
  TensorView grad_x;      // x's shape and dtype
  TensorView grad_phi;    // [F, N*D] fp32
  TensorView grad_alpha;  // alpha's shape: [3], [2] or [1] fp32
  TensorView grad_bias;   // [F] fp32
  std::optional<TensorView> grad_gamma;  // [N, D] fp32, required iff gamma is given
};
MHC_API Status pre_backward(const PreBackwardInputs& in, const PreBackwardOutputs& out,
                    const Options& options = {});

// MhcSinkhorn (SPEC §10): each token's z [N, N] onto the doubly stochastic matrices.
// z is [B,S,N,N] or [T,N,N] fp32, any N >= 1. The caches, both or neither, are this
// library's (only sinkhorn_backward reads them), contiguous fp32:
//   norm_out [2I, .., N, P]: slot 0 the row softmax p, slot k the matrix after step k;
//   sum_out  [2I, .., P]:    slot 0 the softmax's row sums, slot k step k's divisors;
// ".." are z's token dims and P >= N a row pitch (the padding is written as 0):
// P = 8*ceil(N/8) gives CANN's cache sizes, P = N the fused pair's shapes (SPEC §12).
struct SinkhornForwardInputs {
  TensorView z;            // fp32
  double eps = 1e-6;       // used as fp32
  int64_t num_iters = 20;  // I >= 1
};
struct SinkhornForwardOutputs {
  TensorView h_res;                    // z's shape, fp32
  std::optional<TensorView> norm_out;  // } both or
  std::optional<TensorView> sum_out;   // } neither
};
MHC_API Status sinkhorn_forward(const SinkhornForwardInputs& in, const SinkhornForwardOutputs& out,
                                const Options& options = {});

// MhcSinkhornBackward (SPEC §10): from the forward's caches (I from their shapes), or
// from z alone with the forward's eps and num_iters, recomputing the forward per
// token; the two give the same bits.
struct SinkhornBackwardInputs {
  TensorView grad_h_res;               // z's shape, fp32
  std::optional<TensorView> norm_out;  // } the forward's caches, or
  std::optional<TensorView> sum_out;   // }
  std::optional<TensorView> z;         // the forward's input (and eps, num_iters below)
  double eps = 1e-6;
  int64_t num_iters = 20;
};
struct SinkhornBackwardOutputs {
  TensorView grad_z;  // z's shape, fp32
};
MHC_API Status sinkhorn_backward(const SinkhornBackwardInputs& in, const SinkhornBackwardOutputs& out,
                                 const Options& options = {});

// MhcPost (SPEC §11): out[j] = h_post[j] h_out + sum_i H[i, j] x[i] (H transposed),
// or x[j] + h_post[j] h_out without h_res; fp32 in SPEC's order, no fused multiply-add.
// x is [B,S,N,D] or [T,N,D]; the others follow its layout.
struct PostForwardInputs {
  TensorView x;                     // bf16 | fp16 | fp32
  std::optional<TensorView> h_res;  // [.., N, N] fp32; absent = the identity
  TensorView h_out;                 // [.., D], x's dtype
  TensorView h_post;                // [.., N] fp32
};
struct PostForwardOutputs {
  TensorView out;  // x's shape and dtype
};
MHC_API Status post_forward(const PostForwardInputs& in, const PostForwardOutputs& out,
                            const Options& options = {});

// MhcPostBackward (SPEC §11).
struct PostBackwardInputs {
  TensorView grad_out;              // x's shape and dtype
  TensorView x;
  std::optional<TensorView> h_res;  // [.., N, N] fp32; absent = the identity
  TensorView h_out;                 // [.., D], x's dtype
  TensorView h_post;                // [.., N] fp32
};
struct PostBackwardOutputs {
  TensorView grad_x;                     // x's shape; x's dtype, or fp32 (to feed pre_backward's grad_x_post)
  std::optional<TensorView> grad_h_res;  // [.., N, N] fp32; written whenever given, with or without h_res
  TensorView grad_h_out;                 // [.., D], x's dtype
  TensorView grad_h_post;                // [.., N] fp32
};
MHC_API Status post_backward(const PostBackwardInputs& in, const PostBackwardOutputs& out,
                             const Options& options = {});

// MhcPreSinkhorn (SPEC §12), CANN's fused pair: pre_forward without gamma, then
// sinkhorn_forward on z_res with eps = options.hc_eps; the same bits as that chain.
// Alpha has 3 entries; h_res is H.
struct PreSinkhornForwardInputs {
  TensorView x, phi, alpha, bias;
  int64_t num_iters = 20;
};
struct PreSinkhornForwardOutputs {
  TensorView h_in, h_post, h_res;  // h_res: [.., N, N] or [.., N*N]
  // The backward's caches, all five or none: pre_forward's (inv_rms [..] or CANN's
  // [.., 1]) and sinkhorn_forward's (CANN's shapes: P = N).
  std::optional<TensorView> inv_rms, h_mix, h_pre, norm_out, sum_out;
};
MHC_API Status pre_sinkhorn_forward(const PreSinkhornForwardInputs& in, const PreSinkhornForwardOutputs& out,
                                    const Options& options = {});

// Its backward: sinkhorn_backward from the caches, then pre_backward (no gamma, no
// grad_x_post) with h_post recomputed from the caches as the forward formed it.
struct PreSinkhornBackwardInputs {
  TensorView grad_h_in, grad_h_post, grad_h_res;
  TensorView x, phi, alpha, bias;
  TensorView h_pre, h_mix, inv_rms, sum_out, norm_out;  // inv_rms [..] or [.., 1]
};
struct PreSinkhornBackwardOutputs {
  TensorView grad_x, grad_phi, grad_alpha, grad_bias;
};
MHC_API Status pre_sinkhorn_backward(const PreSinkhornBackwardInputs& in, const PreSinkhornBackwardOutputs& out,
                                     const Options& options = {});

// MhcPreSinglePass (SPEC §14), DeepSeek-V4.1's site: MhcPre's maps (gamma optional,
// alpha [3], R = N*N), the Sinkhorn on z_res (sinkhorn_eps, num_iters), and h_in
// collapsed with the carried pre_mix p (the previous site's h_pre), not the site's
// own h_pre. pre_mix absent: the model's first site, h_in = x's stream 0 exactly.
struct PreSinglePassForwardInputs {
  TensorView x, phi, alpha, bias;
  std::optional<TensorView> gamma;    // [N, D]; absent = ones (V4.1 has none)
  std::optional<TensorView> pre_mix;  // [.., N] fp32; absent = the first site
  double sinkhorn_eps = 1e-6;
  int64_t num_iters = 20;
};
struct PreSinglePassForwardOutputs {
  TensorView h_in;     // [.., D], x's dtype
  TensorView h_pre;    // [.., N]: the next site's pre_mix (and a cache)
  TensorView h_post;   // [.., N]
  TensorView h_res;    // [.., N, N] or [.., N*N]: the Sinkhorn's H
  TensorView inv_rms;  // [..]      } the backward's caches
  TensorView h_mix;    // [.., F]   }
};
MHC_API Status pre_single_pass_forward(const PreSinglePassForwardInputs& in, const PreSinglePassForwardOutputs& out,
                                       const Options& options = {});

// Its backward: the Sinkhorn's backward recomputed from z_res (formed again from the
// caches), then MhcPreBackward with g_pre = grad_h_pre and the collapse's terms taken
// with pre_mix. grad_pre_mix is written when given (it needs pre_mix).
struct PreSinglePassBackwardInputs {
  TensorView x, phi, alpha, bias;
  std::optional<TensorView> gamma, pre_mix;
  TensorView grad_h_in;                   // [.., D], x's dtype
  std::optional<TensorView> grad_h_pre;   // [.., N]; absent = 0
  TensorView grad_h_post;                 // [.., N]
  TensorView grad_h_res;                  // [.., N, N] or [.., N*N]: dL/dH
  TensorView inv_rms, h_mix, h_pre, h_post;  // the forward's
  std::optional<TensorView> grad_x_post;  // x's shape; x's dtype or fp32; absent = 0
  double sinkhorn_eps = 1e-6;
  int64_t num_iters = 20;
};
struct PreSinglePassBackwardOutputs {
  TensorView grad_x;                       // x's shape and dtype
  std::optional<TensorView> grad_pre_mix;  // [.., N] fp32
  TensorView grad_phi, grad_alpha, grad_bias;
  std::optional<TensorView> grad_gamma;    // required iff gamma is given
};
MHC_API Status pre_single_pass_backward(const PreSinglePassBackwardInputs& in,
                                        const PreSinglePassBackwardOutputs& out, const Options& options = {});

// MhcCollapse (SPEC §14): h[d] = sum_n pre_mix[n] x[n, d] in fp32, n ascending, x's dtype.
struct CollapseForwardInputs {
  TensorView x;        // [.., N, D]
  TensorView pre_mix;  // [.., N] fp32
};
struct CollapseForwardOutputs {
  TensorView h;  // [.., D], x's dtype
};
MHC_API Status collapse_forward(const CollapseForwardInputs& in, const CollapseForwardOutputs& out,
                                const Options& options = {});
// grad_x[n, d] = pre_mix[n] grad_h[d] (x's dtype); grad_pre_mix[n] = sum_d x[n, d] grad_h[d].
struct CollapseBackwardInputs {
  TensorView grad_h, x, pre_mix;
};
struct CollapseBackwardOutputs {
  TensorView grad_x, grad_pre_mix;
};
MHC_API Status collapse_backward(const CollapseBackwardInputs& in, const CollapseBackwardOutputs& out,
                                 const Options& options = {});

// MhcPostPre (SPEC §15): MhcPost of site s (x, h_res, h_out, h_post) then site s+1's
// pre on the rounded x_next: V4 (single_pass false: MhcPre with gamma and the
// Sinkhorn, h_in collapsed with its own h_pre; pre_mix must be absent) or V4.1
// (single_pass true: pre_single_pass_forward with pre_mix). The same bits as that chain.
struct PostPreForwardInputs {
  TensorView x;                          // [.., N, D] site s's streams
  std::optional<TensorView> h_res;       // [.., N, N] site s's H; absent: the identity
  TensorView h_out, h_post;              // site s's sub-layer output [.., D] (x's dtype) and h_post [.., N]
  TensorView phi, alpha, bias;           // site s+1's
  std::optional<TensorView> gamma, pre_mix;
  int64_t single_pass = 0;
  double sinkhorn_eps = 1e-6;
  int64_t num_iters = 20;
};
struct PostPreForwardOutputs {
  TensorView x_next;                      // [.., N, D], x's dtype
  TensorView h_in, h_pre, h_post_next, h_res_next, inv_rms, h_mix;  // site s+1's pre (its h_post, H)
};
MHC_API Status post_pre_forward(const PostPreForwardInputs& in, const PostPreForwardOutputs& out,
                                const Options& options = {});

// Its backward: site s+1's pre backward (grad_x_next, the gradient x_next receives
// elsewhere, entering as its grad_x_post; in V4 a grad_h_pre adds to h_pre's collapse
// sums), its grad_x rounded once to x's dtype, then MhcPostBackward of site s.
struct PostPreBackwardInputs {
  TensorView x;
  std::optional<TensorView> h_res;
  TensorView h_out, h_post, phi, alpha, bias;
  std::optional<TensorView> gamma, pre_mix;
  TensorView x_next;                        // the forward's
  std::optional<TensorView> grad_x_next;    // x's dtype or fp32; absent = 0
  TensorView grad_h_in;
  std::optional<TensorView> grad_h_pre;     // absent = 0
  TensorView grad_h_post_next, grad_h_res_next;
  TensorView inv_rms, h_mix, h_pre, h_post_next;  // the forward's
  int64_t single_pass = 0;
  double sinkhorn_eps = 1e-6;
  int64_t num_iters = 20;
};
struct PostPreBackwardOutputs {
  TensorView grad_x;                        // x's dtype or fp32
  std::optional<TensorView> grad_h_res;     // written when given
  TensorView grad_h_out, grad_h_post;
  std::optional<TensorView> grad_pre_mix;   // V4.1 with pre_mix only
  TensorView grad_phi, grad_alpha, grad_bias;
  std::optional<TensorView> grad_gamma;     // iff gamma
};
MHC_API Status post_pre_backward(const PostPreBackwardInputs& in, const PostPreBackwardOutputs& out,
                                 const Options& options = {});

// The site backward (SPEC §15): MhcPostBackward, MhcSinkhornBackward and MhcPreBackward
// of one site in two steps around the sub-layer's backward, with no fp32 grad_x
// between them: the same bits as post_backward with an fp32 grad_x then the site's
// pre backward with it as grad_x_post. grad_x_next is the gradient of the site's
// output x_next (MhcPost's out).
// prepare: post_backward without grad_x.
struct SiteBackwardPrepareInputs {
  TensorView grad_x_next;             // [.., N, D], x's dtype
  TensorView x;                       // [.., N, D] the site's streams
  std::optional<TensorView> h_res;    // [.., N, N] the site's H; absent: the identity
  TensorView h_out, h_post;           // the sub-layer's output [.., D] (x's dtype), h_post [.., N]
};
struct SiteBackwardPrepareOutputs {
  std::optional<TensorView> grad_h_res;  // written when given
  TensorView grad_h_out, grad_h_post;
};
MHC_API Status site_backward_prepare(const SiteBackwardPrepareInputs& in, const SiteBackwardPrepareOutputs& out,
                                     const Options& options = {});
// finish: the site's pre backward, V4 (single_pass 0: the Sinkhorn's backward and
// MhcPreBackward, h_in collapsed with its own h_pre, pre_mix absent, a grad_h_pre
// adding to the collapse's sums) or V4.1 (single_pass 1: pre_single_pass_backward),
// grad_x_post formed from h_res and grad_x_next as the post's fp32 grad_x
// (grad_x_next absent: none). grad_x must not overlap grad_x_next.
struct SiteBackwardFinishInputs {
  TensorView x, phi, alpha, bias;
  std::optional<TensorView> gamma, pre_mix;
  std::optional<TensorView> h_res;        // [.., N, N] the site's H (its post's); absent: the identity
  std::optional<TensorView> grad_x_next;  // [.., N, D], x's dtype; absent = 0
  TensorView grad_h_in;
  std::optional<TensorView> grad_h_pre;   // absent = 0
  TensorView grad_h_post, grad_h_res;
  TensorView inv_rms, h_mix, h_pre, h_post;  // the forward's
  int64_t single_pass = 0;
  double sinkhorn_eps = 1e-6;
  int64_t num_iters = 20;
};
struct SiteBackwardFinishOutputs {
  TensorView grad_x;                        // x's dtype
  std::optional<TensorView> grad_pre_mix;   // V4.1 with pre_mix only
  TensorView grad_phi, grad_alpha, grad_bias;
  std::optional<TensorView> grad_gamma;     // iff gamma
};
MHC_API Status site_backward_finish(const SiteBackwardFinishInputs& in, const SiteBackwardFinishOutputs& out,
                                    const Options& options = {});

// MhcRmsNorm (SPEC §16): the RMSNorm an engine fuses into h_in's write, per token
// y[d] = rne((x[d] * 1/sqrt(ms + eps)) * weight[d]), ms = (sum_d x[d]^2) / D in fp32 in
// an order that depends on D only.
struct RmsNormForwardInputs {
  TensorView x;       // [.., D] bf16, fp16 or fp32
  TensorView weight;  // [D], x's dtype or fp32
  double eps = 1e-6;
};
struct RmsNormForwardOutputs {
  TensorView y;  // [.., D], x's dtype
};
MHC_API Status rms_norm_forward(const RmsNormForwardInputs& in, const RmsNormForwardOutputs& out,
                                const Options& options = {});

// The caller's threads (an inference engine's OpenMP team) in place of mhc's pool for
// the calls this thread makes: run(self, workers, share, context) must call
// share(context, w) once for every w in [0, workers), on any of its threads and in any
// order, and return when all have returned. The outputs' bits do not depend on it. The
// backwards' phases, whose workers wait for each other, still run on mhc's pool.
struct Executor {
  void (*run)(void* self, int workers, void (*share)(void* context, int worker), void* context);
  void* self;
};
// Sets this thread's executor (nullptr: mhc's pool); returns the previous one.
MHC_API const Executor* set_thread_executor(const Executor* executor);

// The process default family's name ("amx", "avx512", "avx2", "sve2", "sve", "neon", "portable", "reference").
MHC_API const char* isa();
// Sets the process default; Isa::automatic goes back to MHC_ISA or the best. A family
// this build or CPU cannot run is an error (the message lists those it can); the
// default is then unchanged.
MHC_API Status set_isa(Isa isa);
MHC_API Status set_isa(const char* name);  // by name; nullptr or "" as Isa::automatic
// Whether this build and CPU run the family (automatic: always).
MHC_API bool isa_available(Isa isa);
MHC_API const char* isa_name(Isa isa);  // "automatic" for Isa::automatic
// The family a name names; false for none.
MHC_API bool isa_from_name(const char* name, Isa* isa);
// The families this build and CPU run, best first (what the tests loop over).
MHC_API std::vector<Isa> available_isas();

}  // namespace mhc
