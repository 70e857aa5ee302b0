// Probes of this machine's limits, the two ends of the roofline:
//   - fp32 FMA peak: independent FMA chains held in vector registers, on 1..n
//     threads, for each vector ISA the CPU has (AVX-512, AVX2+FMA); and, where
//     the CPU and OS have AMX-BF16, the bf16 tile peak (for context: the roofline
//     keeps the fp32 FMA peak);
//   - memory bandwidth: a STREAM-triad-like a = b + s*c over arrays far larger
//     than the last-level cache, pre-touched, counted as read + write bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mhc_bench {

struct FmaPeak {
  std::string isa;     // "avx512", "avx2" or "amx-bf16" (bf16 FLOPs)
  int threads = 1;
  double gflops = 0;   // best of several repetitions
};

struct TriadBandwidth {
  int threads = 1;
  double gbytes_per_s = 0;  // best of several repetitions, 3 arrays counted (2 read + 1 write)
};

struct MachineLimits {
  std::string cpu_model;
  int hardware_threads = 1;
  int64_t llc_bytes = 0;              // last-level cache size as the OS reports it
  bool has_avx512 = false, has_avx2_fma = false, has_amx_bf16 = false;
  std::vector<FmaPeak> fma_peaks;     // every (isa, threads) measured
  std::vector<TriadBandwidth> bandwidths;
  int64_t triad_array_bytes = 0;      // size of each of the 3 arrays
  double first_touch_us_per_page = 0; // cost of faulting in fresh 4 KiB pages (pre-touch, 1 thread)

  // Peak for an ISA name at a thread count; nullopt when not measured.
  std::optional<double> peak_gflops(const std::string& isa, int threads) const;
  std::optional<double> bandwidth_gbs(int threads) const;
  // The widest vector ISA the CPU has ("avx512", "avx2" or "" if neither).
  std::string widest_isa() const;
};

// Runs every probe for 1 and for `threads` threads. `array_mib` is the size of
// each triad array in MiB (0: max(256 MiB, the LLC size)).
MachineLimits probe_machine(int threads, int64_t array_mib);

// The peak the roofline uses for the kernel family in use: AVX-512's for
// "avx512", AVX2's for "avx2", the widest ISA's otherwise (portable and
// reference have no peak of their own; the machine's is the target).
struct RooflinePeak {
  std::string isa;
  double gflops = 0;
};
RooflinePeak roofline_peak_for(const MachineLimits& m, const std::string& kernel_isa, int threads);

}  // namespace mhc_bench
