// mhc-bench --check (check_mode.hpp): thin calls of the test drivers.
#include "check_mode.hpp"

#include <algorithm>
#include <cstdio>

#include "driver/post.hpp"
#include "driver/pre.hpp"
#include "driver/pre_single_pass.hpp"
#include "driver/sinkhorn.hpp"

namespace mhc_bench {
namespace {

int64_t tokens(int64_t T, int64_t max_tokens) { return max_tokens > 0 ? std::min(T, max_tokens) : T; }

// One problem's line; true when it passed.
bool report(const std::string& what, const mhc_test::driver::Report& r) {
  std::printf("%-58s %s  %s\n", what.c_str(), r.passed() ? "passed" : "FAILED", r.line().c_str());
  for (const std::string& f : r.failures) std::printf("    %s\n", f.c_str());
  std::fflush(stdout);
  return r.passed();
}

}  // namespace

int run_checks(const std::vector<ShapeSpec>& shapes, const std::vector<std::string>& layer_cases,
               int64_t max_tokens) {
  namespace driver = mhc_test::driver;
  bool all = true;
  std::printf("mhc-bench --check: mhc %s, default kernels %s; every face on every family against float64\n",
              mhc_version(), mhc::isa());
  for (const ShapeSpec& s : shapes) {
    mhc_test::Config c;
    c.N = s.N, c.D = s.D, c.B = 1, c.S = tokens(s.T, max_tokens), c.dtype = s.dtype;
    c.gamma = s.gamma, c.grad_x_post = s.grad_x_post, c.seed = 7;
    const std::string shape = s.name + " (T=" + std::to_string(c.S) + " N=" + std::to_string(c.N) +
                              " D=" + std::to_string(c.D) + " " + s.dtype_name() + ")";
    all = report(shape + " MhcPre", driver::check(driver::PreForwardDriver(), c)) && all;
    if (s.backward) all = report(shape + " MhcPreBackward", driver::check(driver::PreBackwardDriver(), c)) && all;
  }
  for (const std::string& name : layer_cases) {
    if (name == "post") {
      mhc_test::layer::PCase c;
      c.S = tokens(4096, max_tokens), c.N = 4, c.D = 4096, c.dtype = mhc::DType::bf16, c.seed = 7;
      all = report("post (T=" + std::to_string(c.S) + " N=4 D=4096 bf16) MhcPost + backward",
                   driver::check(driver::PostDriver(), c)) &&
            all;
    } else if (name == "boundary") {
      mhc_test::single_pass::SCase c;
      c.S = tokens(4096, max_tokens), c.N = 4, c.D = 4096, c.dtype = mhc::DType::bf16, c.seed = 7;
      all = report("boundary (T=" + std::to_string(c.S) + " N=4 D=4096 bf16) MhcPreSinglePass + backward",
                   driver::check(driver::PreSinglePassDriver(), c)) &&
            all;
    } else if (name == "sinkhorn") {
      mhc_test::layer::SCase c;
      c.S = tokens(65536, max_tokens), c.N = 4, c.I = 20, c.pitch = 8, c.seed = 7;
      all = report("sinkhorn (T=" + std::to_string(c.S) + " N=4, 20 iterations) MhcSinkhorn + backward",
                   driver::check(driver::SinkhornDriver(), c)) &&
            all;
    }
  }
  std::printf("check: %s\n", all ? "PASSED" : "FAILED");
  return all ? 0 : 1;
}

}  // namespace mhc_bench
