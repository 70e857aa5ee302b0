// Operands whose innermost dimension is not unit-stride are gathered once per
// call into contiguous copies in the workspace, and such outputs are computed
// into contiguous buffers and scattered afterwards, so that the kernels see
// unit-stride rows only. Values move as raw elements: the bits are those of a
// contiguous call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace mhc::ops {

class Staging {
 public:
  // Registers a tensor of the problem (absent or unit-stride ones are skipped).
  void add(core::Strided* tensor, bool output);
  // Bytes of workspace the staged copies need (64-byte aligned each).
  size_t bytes() const { return bytes_; }
  // Points each registered tensor at its copy in `base` (bytes() bytes, 64-byte
  // aligned) and gathers the inputs, on `threads` threads.
  void gather(void* base, int threads);
  // Writes the staged outputs to where they belong.
  void scatter(int threads) const;

 private:
  struct Entry {
    core::Strided* tensor;
    core::Strided original;
    bool output;
    size_t offset;
  };
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
};

}  // namespace mhc::ops
