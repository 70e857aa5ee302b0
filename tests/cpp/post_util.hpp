// Shared by the tests of MhcPost and MhcPostBackward (SPEC §11; post_*_test.cpp):
// a case's tensors, and the calls that run it.
#pragma once

#include <gtest/gtest.h>

#include "driver/post.hpp"
#include "layer_util.hpp"

namespace mhc_test::layer {

inline Bag run_both(const PCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = forward(b, o);
  EXPECT_TRUE(s.ok()) << s.message();
  s = backward(b, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return b;
}

}  // namespace mhc_test::layer
