// mhc: the mHC pre-block operators (MhcPre, MhcPreBackward) on CPUs.
//
// The C++ face. Tensors are non-owning views (pointer, dtype, shape, strides in
// elements). Functions return a Status; on any error no output is written and
// the message names the tensor, what was expected and what was given.
// The formulas, shapes and rules are those of docs/SPEC.md.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

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

// Kernel families, best first. `automatic` is the process default: set_isa(), else
// MHC_ISA in the environment, else the best family this build and CPU run.
enum class Isa : int32_t {
  automatic = MHC_ISA_DEFAULT,
  amx = MHC_ISA_AMX,
  avx512 = MHC_ISA_AVX512,
  avx2 = MHC_ISA_AVX2,
  portable = MHC_ISA_PORTABLE,
  reference = MHC_ISA_REFERENCE
};

// The operands of the matrix products (SPEC §7): fp32 (CANN's opImplMode 0), or
// rounded to HF32 first (opImplMode 1, torch_npu's inner_precise=1); the products
// and sums are fp32 either way.
enum class MatmulPrecision : int32_t { fp32 = MHC_MATMUL_FP32, hf32 = MHC_MATMUL_HF32 };

struct Options {
  double norm_eps = 1e-6;
  double hc_eps = 1e-6;
  int num_threads = 0;  // 0: MHC_NUM_THREADS if set, else all hardware threads
  Isa isa = Isa::automatic;  // a family this CPU cannot run is an error naming it
  MatmulPrecision matmul_precision = MatmulPrecision::fp32;
};

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
  std::optional<TensorView> grad_x_post;  // x's shape and dtype; absent = 0
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

// The process default family's name ("amx", "avx512", "avx2", "portable", "reference").
MHC_API const char* isa();
// Sets the process default; Isa::automatic goes back to MHC_ISA or the best. A family
// this build or CPU cannot run is an error (the message lists those it can); the
// default is then unchanged.
MHC_API Status set_isa(Isa isa);
MHC_API Status set_isa(const char* name);  // by name; nullptr or "" as Isa::automatic
// Whether this build and CPU run the family (automatic: always).
MHC_API bool isa_available(Isa isa);
MHC_API const char* isa_name(Isa isa);  // "automatic" for Isa::automatic
// The family a name names ("scalar" is portable's older name); false for none.
MHC_API bool isa_from_name(const char* name, Isa* isa);

}  // namespace mhc
