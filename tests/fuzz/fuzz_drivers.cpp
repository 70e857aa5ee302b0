// libFuzzer target: the operators' test drivers (tests/driver/) over problems drawn
// from the input — which operator, its shape, dtype, variant, scalars and seed —
// each through every face on every family against the float64 references, as the
// suites run their lists. The other targets fuzz the arguments (layouts, invalid
// calls, extreme values) and check against the reference family; this one fuzzes
// the valid problem space against float64.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "driver/post.hpp"
#include "driver/pre.hpp"
#include "driver/pre_single_pass.hpp"
#include "driver/pre_sinkhorn.hpp"
#include "driver/sinkhorn.hpp"
#include "fuzz_common.hpp"

namespace {

using mhc::DType;
using mhc_fuzz::Bytes;

DType dtype_of(Bytes& in) {
  const DType all[] = {DType::bf16, DType::fp16, DType::fp32};
  return all[in.pick(3)];
}
// Tokens as [T] or [B, S] (B*S <= 24, empty included).
template <class Problem>
void tokens_of(Bytes& in, Problem& p) {
  p.bsnd = in.flag();
  p.B = p.bsnd ? int64_t(in.pick(4)) : 1;
  p.S = int64_t(in.pick(p.bsnd ? 7 : 25));
}
// N in 1..8, D in 1..320 (K = N*D within the bounds' 2400 of the pre block).
int64_t pick_d(Bytes& in, int64_t N) {
  const int64_t d = 1 + int64_t(in.u16() % 320);
  return std::min<int64_t>(d, std::max<int64_t>(1, 2400 / N));
}

template <class Driver, class Problem>
void check(const Driver& driver, const Problem& p, const std::string& what) {
  const mhc_test::driver::Report r = mhc_test::driver::check(driver, p);
  if (r.passed()) return;
  std::fprintf(stderr, "fuzz_drivers: %s %s\n", what.c_str(), p.name().c_str());
  for (const std::string& f : r.failures) std::fprintf(stderr, "  %s\n", f.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  namespace driver = mhc_test::driver;
  switch (in.pick(7)) {
    case 0:
    case 1: {  // MhcPre forward or backward
      mhc_test::Config c;
      const bool backward = in.flag();
      c.form = mhc_test::FForm(in.pick(4));
      c.N = 1 + int64_t(in.pick(c.form == mhc_test::FForm::permutation ? 5 : 8));
      c.D = pick_d(in, c.N);
      tokens_of(in, c);
      c.dtype = dtype_of(in);
      c.gamma = in.flag();
      c.grad_x_post = in.flag();
      c.grad_x_post_fp32 = c.dtype != DType::fp32 && in.flag();
      c.caches = in.flag();
      c.flat_residual = in.flag();
      c.norm_eps = in.chance(64) ? 1e-3 : 1e-6;
      c.hc_eps = in.chance(64) ? 1e-3 : 1e-6;
      c.seed = in.u64();
      if (backward) check(driver::PreBackwardDriver(), c, "MhcPreBackward");
      else check(driver::PreForwardDriver(), c, "MhcPre");
      break;
    }
    case 2: {  // MhcSinkhorn and its backward
      mhc_test::layer::SCase c;
      tokens_of(in, c);
      c.N = 1 + int64_t(in.pick(8));
      c.I = 1 + int64_t(in.pick(20));
      c.eps = in.chance(64) ? 0.0 : in.chance(64) ? 0.05 : 1e-6;
      const int64_t pitches[] = {0, c.N, 8 * ((c.N + 7) / 8)};
      c.pitch = pitches[in.pick(3)];
      c.scale = 0.5 + double(in.pick(5)) * 0.5;
      c.seed = in.u64();
      check(driver::SinkhornDriver(), c, "MhcSinkhorn");
      break;
    }
    case 3: {  // MhcPost and its backward
      mhc_test::layer::PCase c;
      tokens_of(in, c);
      c.N = 1 + int64_t(in.pick(8));
      c.D = pick_d(in, c.N);
      c.dtype = dtype_of(in);
      c.h_res = in.flag();
      c.grad_x_fp32 = in.flag();
      c.seed = in.u64();
      check(driver::PostDriver(), c, "MhcPost");
      break;
    }
    case 4: {  // MhcPreSinkhorn and its backward (bf16 / fp16 / fp32 x)
      mhc_test::layer::FCase c;
      tokens_of(in, c);
      c.N = 1 + int64_t(in.pick(8));
      c.D = pick_d(in, c.N);
      c.dtype = dtype_of(in);
      c.I = 1 + int64_t(in.pick(20));
      const int64_t pitches[] = {0, c.N, 8 * ((c.N + 7) / 8)};
      c.pitch = pitches[in.pick(3)];
      c.flat = in.flag();
      c.hc_eps = in.chance(64) ? 1e-3 : 1e-6;
      c.seed = in.u64();
      check(driver::PreSinkhornDriver(), c, "MhcPreSinkhorn");
      break;
    }
    case 5: {  // MhcPreSinglePass and its backward (SPEC §14)
      mhc_test::single_pass::SCase c;
      tokens_of(in, c);
      c.N = 1 + int64_t(in.pick(8));
      c.D = 1 + int64_t(in.pick(64));
      c.dtype = dtype_of(in);
      c.I = 1 + int64_t(in.pick(20));
      c.gamma = in.flag();
      c.first_site = in.flag();
      c.grad_h_pre = !in.flag();
      c.grad_x_post = in.flag();
      c.flat = in.flag();
      c.hc_eps = in.chance(64) ? 1e-3 : 1e-6;
      c.norm_eps = in.chance(64) ? 1e-3 : 1e-6;
      c.sinkhorn_eps = in.chance(64) ? 0.0 : in.chance(64) ? 0.05 : c.hc_eps;
      c.seed = in.u64();
      check(driver::PreSinglePassDriver(), c, "MhcPreSinglePass");
      break;
    }
    default: {  // MhcCollapse and its backward
      mhc_test::driver::CollapseCase c;
      tokens_of(in, c);
      c.N = 1 + int64_t(in.pick(8));
      c.D = 1 + int64_t(in.pick(64));
      c.dtype = dtype_of(in);
      c.seed = in.u64();
      check(driver::CollapseDriver(), c, "MhcCollapse");
      break;
    }
  }
  return 0;
}
