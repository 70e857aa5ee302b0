// Shared by the tests of DeepSeek-V4.1's operators (SPEC §14; single_pass_*_test.cpp):
// a case run forward then backward.
#pragma once

#include <gtest/gtest.h>

#include "driver/pre_single_pass.hpp"
#include "layer_util.hpp"

namespace mhc_test::single_pass {
using layer::family_name;

inline mhc::Options options_for(const SCase& c, mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  o.hc_eps = c.hc_eps;
  o.norm_eps = c.norm_eps;
  return o;
}

inline void run_both(Bag& b, const SCase& c, const mhc::Options& o) {
  mhc::Status s = forward(b, c, o);
  ASSERT_TRUE(s.ok()) << s.message();
  s = backward(b, c, o);
  ASSERT_TRUE(s.ok()) << s.message();
}

inline Bag run_case(const SCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  run_both(b, c, o);
  return b;
}

inline std::vector<std::string> all_outputs(const SCase& c) {
  std::vector<std::string> names = kForwardOutputs;
  for (const std::string& n : backward_outputs(c)) names.push_back(n);
  return names;
}

}  // namespace mhc_test::single_pass
