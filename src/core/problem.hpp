// The problem descriptor: what validation produces and planning and kernels consume.
// Plain data, no behaviour beyond index arithmetic. Every tensor is resolved to a
// canonical index space so kernels never see layouts, ranks or optional shapes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "mhc/mhc.hpp"

namespace mhc::core {

// A tensor resolved to canonical dims; data == nullptr means "absent".
// Per-token tensors use dims [B, S, i, j] (TND input: B = 1, S = T); the
// others use their natural dims with unused trailing dims of extent 1.
struct Strided {
  void* data = nullptr;
  DType dtype = DType::fp32;
  int64_t shape[4] = {1, 1, 1, 1};
  int64_t stride[4] = {0, 0, 0, 0};  // elements

  bool present() const { return data != nullptr; }
  // Element offset of token t (per-token tensors): t = b*S + s.
  int64_t token_offset(int64_t t) const {
    return (t / shape[1]) * stride[0] + (t % shape[1]) * stride[1];
  }
  // Offset of element (i, j) of token t; of element (i, j) for non-token tensors.
  int64_t at(int64_t t, int64_t i, int64_t j) const {
    return token_offset(t) + i * stride[2] + j * stride[3];
  }
  int64_t at(int64_t i, int64_t j) const { return i * stride[2] + j * stride[3]; }
  // Residual logit r of token t, whether stored [.., N, N] or flat [.., R].
  int64_t residual_at(int64_t t, int64_t r) const {
    return token_offset(t) + (r / shape[3]) * stride[2] + (r % shape[3]) * stride[3];
  }
  float load(int64_t offset) const;  // element at offset, as fp32
  void store(int64_t offset, float value) const;
  bool operator==(const Strided&) const = default;  // the same tensor: data, dtype, shape, strides
};

struct Dims {
  int64_t B = 0, S = 0, T = 0;  // T = B*S
  int64_t N = 0, D = 0, K = 0;  // K = N*D
  int64_t R = 0, F = 0;         // F = 2N + R; R = 0 for a two- or one-entry alpha
  bool two_entry_alpha = false; // alpha has 2 entries, F = 2N, no residual branch
  bool head = false;            // alpha has 1 entry, F = N: the pre branch only (SPEC §6)
  int alpha_entries() const { return head ? 1 : two_entry_alpha ? 2 : 3; }
  bool bsnd = false;            // x came as [B,S,N,D]
  bool operator==(const Dims&) const = default;
};

struct ForwardProblem {
  Dims dims;
  Isa isa = Isa::reference;  // the kernel family that runs it (never automatic)
  bool hf32 = false;         // the product's operands rounded to HF32 (SPEC §7)
  double norm_eps = 1e-6;
  double hc_eps = 1e-6;
  // inputs
  Strided x;      // [B,S,N,D]
  Strided phi;    // [F,K]
  Strided alpha;  // [A]
  Strided bias;   // [F]
  Strided gamma;  // [N,D] or absent
  // outputs
  Strided h_in;     // [B,S,D]
  Strided h_post;   // [B,S,N]
  Strided h_res;    // [B,S,I,J] with I*J = R, or absent
  Strided inv_rms;  // [B,S]   } all three
  Strided h_mix;    // [B,S,F] } or
  Strided h_pre;    // [B,S,N] } none
  // Single pass (SPEC §14): h_in collapses with pre_mix [B,S,N] when present, is
  // stream 0 when select_first_stream; otherwise with h_pre.
  Strided pre_mix;
  bool select_first_stream = false;
  // Weights prepared once (options.prepared, ops/pre/prepared.hpp) and its id: no
  // other handle of the process has it, so a primitive cached for a freed handle
  // never serves one made later at the same address.
  const PreparedPre* prepared = nullptr;
  uint64_t prepared_id = 0;
  bool phi_rounded = false;  // phi already holds HF32 values (the driver's prepared form)
  // The same problem, every field (a primitive cache's key). The eps compare by
  // value: -0 and +0 give the same results, and a NaN never matches (no hit).
  bool operator==(const ForwardProblem&) const = default;
};

struct BackwardProblem {
  Dims dims;
  Isa isa = Isa::reference;  // the kernel family that runs it (never automatic)
  bool hf32 = false;         // the products' operands rounded to HF32 (SPEC §7)
  double hc_eps = 1e-6;
  // inputs
  Strided x;            // [B,S,N,D]
  Strided phi;          // [F,K]
  Strided alpha;        // [A]
  Strided grad_h_in;    // [B,S,D]
  Strided grad_h_post;  // [B,S,N]
  Strided grad_h_res;   // [B,S,I,J] with I*J = R, or absent
  Strided inv_rms;      // [B,S]
  Strided h_mix;        // [B,S,F]
  Strided h_pre;        // [B,S,N]
  Strided h_post;       // [B,S,N]
  Strided gamma;        // [N,D] or absent
  Strided grad_x_post;  // [B,S,N,D] or absent
  // The site backward's finish (SPEC §15), both or neither: grad_x_post formed from
  // the site post's grad_out [B,S,N,D] (x's dtype) and H [B,S,N,N].
  Strided post_grad_out;
  Strided post_h_res;
  // Single pass (SPEC §14), each [B,S,N] or absent: the collapse's weights instead
  // of h_pre; g_pre given; the collapse's sums written out.
  Strided pre_mix;
  Strided grad_h_pre;
  Strided grad_pre_mix;  // output
  bool grad_h_pre_adds = false;  // g_pre = the sums + grad_h_pre (V4's h_pre as an output, SPEC §15)
  // outputs
  Strided grad_x;       // [B,S,N,D]
  Strided grad_phi;     // [F,K]
  Strided grad_alpha;   // [A]
  Strided grad_bias;    // [F]
  Strided grad_gamma;   // [N,D] or absent
};

inline float Strided::load(int64_t offset) const { return load_element(data, dtype, offset); }
inline void Strided::store(int64_t offset, float value) const {
  store_element(data, dtype, offset, value);
}

}  // namespace mhc::core
