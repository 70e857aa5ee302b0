// How much CPU other processes took while we measured: the machine has few
// cores, so a concurrent build or test run skews every figure. Reported next to
// each measurement so a noisy run can be recognised (and rerun).
#pragma once

#include <cstdint>

namespace mhc_bench {

class ForeignCpuMeter {
 public:
  void start();
  // CPU time of every other process (and of the kernel on their behalf, and steal)
  // over the wall time since start(), in units of CPUs: 0 on a quiet machine,
  // 1.0 = one whole core busy elsewhere. Negative if /proc could not be read.
  double foreign_cpus() const;

 private:
  int64_t machine_busy_ticks_ = 0, own_ticks_ = 0;
  double wall_start_ = 0;
};

}  // namespace mhc_bench
