// Shared by the tests of MhcPreSinkhorn and its backward (SPEC §12;
// pre_sinkhorn_*_test.cpp): a case's shapes, its tensors (and the unfused chain's,
// "u_" names), and the fused calls that run it.
#pragma once

#include <gtest/gtest.h>

#include "driver/pre_sinkhorn.hpp"
#include "layer_util.hpp"

namespace mhc_test::layer {

inline Bag run_fused(const FCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = fused_forward(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (c.pitch > 0) {
    s = fused_backward(b, o);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return b;
}

}  // namespace mhc_test::layer
