// Shared by the tests of MhcSinkhorn and MhcSinkhornBackward (SPEC §10;
// sinkhorn_*_test.cpp): a case's shapes, its tensors, and the calls that run it.
#pragma once

#include <gtest/gtest.h>

#include "driver/sinkhorn.hpp"
#include "layer_util.hpp"

namespace mhc_test::layer {

// Forward (with caches when c has them), backward from the caches and from z.
inline Bag run_all(const SCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = forward(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (c.pitch > 0) {
    s = backward_from_caches(b, o);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  s = backward_from_z(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return b;
}

}  // namespace mhc_test::layer
