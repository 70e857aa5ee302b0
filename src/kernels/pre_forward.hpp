// What a kernel family gives the MhcPre driver (ops/pre_forward): functions over
// a validated problem and the typed buffers the driver's plan lays out. Kernels
// allocate nothing, start no threads and read no environment.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace mhc::kernels {

// Tokens per forward work item of the SIMD and portable families: each item reads
// all of phi once, so longer items read it less often; its u chunk (64 x 8 KiB)
// still stays in L2 (mhc-kernel-bench: PreForward/avx512/T:256).
inline constexpr int64_t kTokensPerItem = 64;

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

// One forward work item: the problem, the worker's scratch, the prepared operands.
struct ForwardItem {
  const core::ForwardProblem* problem;
  float* scratch;  // scratch_floats(dims) floats, the worker's own
  const ForwardPrepared* prepared;
};

struct PreForwardKernels {
  // Scratch floats one worker needs.
  int64_t (*scratch_floats)(const core::Dims&) = nullptr;
  // Every per-token output of tokens [t0, t1).
  void (*tokens)(const ForwardItem&, int64_t t0, int64_t t1) = nullptr;
  // Most tokens per item (the driver cuts short calls finer), from dims and dtypes
  // only, never from T alone (batch invariance). nullptr: kTokensPerItem.
  int64_t (*item_tokens)(const core::ForwardProblem&) = nullptr;
  // Bytes of operands prepared once per call (0: none), and part `part` of `parts`
  // of their preparation (the parts run in parallel); returns whether that part's
  // operands were finite.
  int64_t (*prepared_bytes)(const core::ForwardProblem&) = nullptr;
  bool (*prepare)(const core::ForwardProblem&, void* prepared, int64_t part, int64_t parts) = nullptr;
  // All tokens as one item on the calling thread (the float64 reference, which
  // allocates its own memory: only the caller's exceptions reach the face).
  bool serial = false;
};

// The prepare hooks are called with at most this many parts (the thread pool's cap).
inline constexpr int64_t kMaxPrepareParts = 1024;

}  // namespace mhc::kernels
