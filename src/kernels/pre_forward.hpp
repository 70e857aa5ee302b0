// What a kernel family gives the MhcPre driver (ops/pre/forward_*): functions over
// the call's operands (pointers, strides, counts) and the typed buffers the
// driver's plan lays out. Kernels allocate nothing, start no threads and read no
// environment.
#pragma once

#include <cstdint>

#include "kernels/operands.hpp"

namespace mhc::kernels {

// Tokens per forward work item of the SIMD and portable families: each item reads
// all of phi once, so longer items read it less often; its u chunk (64 x 8 KiB)
// still stays in L2 (mhc-kernel-bench: PreForward/avx512/T:256).
inline constexpr int64_t kTokensPerItem = 64;

// Every fp32 family forms a token's long sums over K (m = phi.u and sum(v^2)) slice
// by slice: each slice of kSliceColumns columns from zero, the slices' lane sums
// then added in slice order. So workers may share a token's slices (the decode
// path: calls of at most kDecodeTokens tokens split K, not tokens) with the bits of
// one worker running them all, and the rounding error grows with K / kSliceColumns
// plus a slice's length, not with K (docs/performance.md, Accuracy).
inline constexpr int64_t kSliceColumns = 2048;
// Within a slice, the squares are summed in blocks of at most this many columns
// from zero, each block added to the slice's lanes: bf16 and fp16 squares are exact
// with few significant bits, so long runs of them round down on average
// (tests/python/test_accuracy.py, test_forward_accuracy_at_width: the mean signed
// error of inv_rms).
inline constexpr int64_t kSquareBlockColumns = 256;
inline constexpr int64_t kDecodeTokens = 64;
inline int64_t slice_count(int64_t K) { return (K + kSliceColumns - 1) / kSliceColumns; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
// Floats rounded up so every buffer starts on a 64-byte boundary.
inline int64_t align16(int64_t floats) { return round_up(floats, 16); }

// The preparation of operands shared by every item of one call (packed phi):
// the bytes, and one flag per part saying whether its operands were finite.
struct ForwardPrepared {
  void* data = nullptr;
  uint8_t* finite = nullptr;  // [parts]
  int parts = 0;
  bool all_finite() const {
    for (int i = 0; i < parts; ++i)
      if (!finite[i]) return false;
    return true;
  }
};

// MhcPre's operands (SPEC §2). Rows of x and h_in are unit-stride, their tokens
// at uniform strides; the fp32 vectors are contiguous.
struct ForwardOperands {
  PreShape shape;
  double norm_eps = 0.0, hc_eps = 0.0;  // as given: the fp32 families round them, the reference does not
  StreamRows<const void> x;    // [T][N][D]
  Matrix<const float> phi;     // [F][K]
  // phi as the table's products read it (lay_out_phi_panels), made once for weights
  // prepared once; nullptr: the kernels arrange what they read at each call.
  const float* phi_panels = nullptr;
  Matrix<const float> gamma;   // [N][D], or absent
  const float* alpha = nullptr;  // [alpha_entries()]
  const float* bias = nullptr;   // [F]
  StreamRows<void> h_in;       // [T][D]
  TokenRows<float> h_post;     // [T][N], absent for the head
  TokenRows<float> h_res;      // [T][R], absent unless alpha has 3 entries
  TokenRows<float> inv_rms;    // [T][1] } all three
  TokenRows<float> h_mix;      // [T][F] } or
  TokenRows<float> h_pre;      // [T][N] } none
  // What h_in collapses the streams with (SPEC §14): the carried pre-mix when
  // present, else the token's own h_pre; select_first_stream: h_in = stream 0.
  TokenRows<const float> pre_mix;  // [T][N], or absent
  bool select_first_stream = false;
  bool streaming_stores = true;  // h_in far larger than the caches may bypass them (the driver's policy)
};

// The forward after m = phi.u, for tokens [t0, t1): per token sum(v^2) from 16
// lanes folded in a fixed order, the per-token outputs, and h_in. Token t's m at
// m + (t - t0) * m_stride, its 16 lanes of sum(v^2) at sq_lanes + (t - t0) * 16;
// h_pre: N floats of scratch.
using FinishTokens = void (*)(const ForwardOperands& o, int64_t t0, int64_t t1, const float* m,
                              int64_t m_stride, const float* sq_lanes, float* h_pre);

// One forward work item: the operands, the worker's scratch, the prepared operands.
struct ForwardItem {
  const ForwardOperands* operands;
  float* scratch;  // scratch_floats(shape) floats, the worker's own
  const ForwardPrepared* prepared;
  FinishTokens finish = nullptr;  // the base table's finish_tokens, for tables that have a base
};

struct PreForwardKernels {
  // Scratch floats one worker needs.
  int64_t (*scratch_floats)(const PreShape&) = nullptr;
  // Every per-token output of tokens [t0, t1).
  void (*tokens)(const ForwardItem&, int64_t t0, int64_t t1) = nullptr;
  // Most tokens per item (the driver cuts short calls finer), from dims and dtypes
  // only, never from T alone (batch invariance). nullptr: kTokensPerItem.
  int64_t (*item_tokens)(const PreShape&) = nullptr;
  // Bytes of operands prepared once per call (0: none), and part `part` of `parts`
  // of their preparation (the parts run in parallel, each with a worker's scratch
  // of scratch_floats); returns whether that part's operands were finite.
  int64_t (*prepared_bytes)(const PreShape&) = nullptr;
  bool (*prepare)(const ForwardOperands&, void* prepared, int64_t part, int64_t parts, float* scratch) = nullptr;
  // Whether, for this shape, prepare reads only phi, gamma and the shape's dims
  // other than T, so that its bytes serve every call of the shape whatever T and
  // x (weights prepared once, ops/pre/prepared.hpp). nullptr: never.
  bool (*prepare_reads_weights_only)(const PreShape&) = nullptr;
  // Bytes of phi laid out as this table's products read it (nullptr: no such form),
  // and that layout made from the operands' phi, for ForwardOperands::phi_panels.
  int64_t (*phi_panels_bytes)(const PreShape&) = nullptr;
  void (*lay_out_phi_panels)(const ForwardOperands&, float* panels) = nullptr;
  // Whether the table serves this call (nullptr: every call); the calls it does
  // not serve run on its registry entry's base table, which also finishes its items.
  bool (*applies)(const PreShape&) = nullptr;
  // The forward after m = phi.u (FinishTokens), offered to tables built on this one.
  FinishTokens finish_tokens = nullptr;
  // All tokens as one item on the calling thread (the float64 reference, which
  // allocates its own memory: only the caller's exceptions reach the face).
  bool serial = false;
};

// The prepare hooks are called with at most this many parts (the thread pool's cap).
inline constexpr int64_t kMaxPrepareParts = 1024;

}  // namespace mhc::kernels
