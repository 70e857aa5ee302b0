// Two measures of the extra memory an operator call uses beyond its inputs and
// outputs:
//   - peak RSS: VmHWM minus a baseline VmRSS taken after the inputs and outputs
//     are allocated and touched. The kernel's high-water mark is reset first
//     (echo 5 > /proc/self/clear_refs) and glibc's free heap returned to the OS
//     (malloc_trim), so only pages touched after the baseline count. It sees
//     everything: workspace, thread stacks, glibc arenas; page granular.
//   - counted allocations: every malloc/calloc/realloc/aligned_alloc/
//     posix_memalign/free and anonymous mmap/munmap of the statically linked
//     library, and every C++ operator new/delete of the process, is counted; the
//     peak of live bytes above the level at the start of the measurement is what
//     the calls allocated (touched or not), and what is still live at the end is
//     what the library retains between calls (e.g. a reused workspace).
#pragma once

#include <cstdint>

namespace mhc_bench {

class PeakRssMeter {
 public:
  // Returns the heap to the OS, resets the peak and records the baseline.
  void start();
  // Peak RSS since start() minus the baseline (bytes); -1 if the peak could not
  // be reset (then the figure would be the process's lifetime peak: not reported).
  int64_t extra_bytes() const;
  bool reset_supported() const { return reset_ok_; }

 private:
  int64_t baseline_ = 0;
  bool reset_ok_ = false;
};

class CountedMemoryMeter {
 public:
  void start();                       // peak := current live bytes
  int64_t peak_extra_bytes() const;   // peak live bytes since start() minus live bytes at start()
  int64_t retained_bytes() const;     // live bytes now minus live bytes at start()
 private:
  int64_t start_live_ = 0;
};

// Current and peak resident set (bytes), from /proc/self/status.
int64_t resident_bytes();
int64_t peak_resident_bytes();

// Live bytes as counted by the wrappers (see memory_meter.cpp).
int64_t counted_live_bytes();

}  // namespace mhc_bench
