// Operands that do not fit the kernels' view of them (kernel_views.hpp: rows
// not unit-stride, tokens not at a uniform stride) are gathered once per call
// into contiguous copies in the workspace, and such outputs are computed into
// contiguous buffers and scattered afterwards. Values move as raw elements: the
// bits are those of a contiguous call. A tensor may also be staged to be
// rounded (HF32 operands), whatever its layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/problem.hpp"
#include "ops/kernel_views.hpp"

namespace mhc::ops {

enum class Rounding { none, hf32 };

class Staging {
 public:
  // Registers a tensor of the problem (absent ones, and those that fit `view`
  // and need no rounding, are skipped). Rounding applies to fp32 inputs.
  void add(core::Strided* tensor, View view, bool output, Rounding rounding = Rounding::none);
  // The workspace of a call whose plan needs plan_bytes: the plan's region, then
  // the staged copies (64-byte aligned each).
  size_t workspace_bytes(size_t plan_bytes) const {
    return bytes_ > 0 ? copies_offset(plan_bytes) + bytes_ : plan_bytes;
  }
  // Whether any tensor is staged.
  bool any() const { return !entries_.empty(); }
  // Points each registered tensor at its copy in `workspace` (past the plan's
  // plan_bytes) and gathers the inputs, on `threads` threads.
  void gather(void* workspace, size_t plan_bytes, int threads);
  // Writes the staged outputs to where they belong.
  void scatter(int threads) const;

 private:
  static size_t copies_offset(size_t plan_bytes) { return (plan_bytes + 63) / 64 * 64; }

  struct Entry {
    core::Strided* tensor;
    core::Strided original;
    bool output;
    Rounding rounding;
    size_t offset;
  };
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
};

}  // namespace mhc::ops
