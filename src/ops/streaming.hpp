// Whether kernels may write outputs far larger than the caches with non-temporal
// (streaming) stores, which skip reading each line before writing it. Read once:
// MHC_STREAMING_STORES=0 or 1, else on, except on AMD CPUs: there (Zen 3 under KVM)
// they made `mhc-bench --shapes post` 2.6× slower (MhcPost forward 47.5 against
// 18.1 ms, its backward 85 against 56.6 ms) and varied up to 4× run to run, where
// Intel's gain a third of the traffic. The bits are the same either way.
#pragma once

namespace mhc::ops {

bool streaming_stores();

}  // namespace mhc::ops
