// gtest's side of the operators' test drivers (tests/driver/): a problem's report
// passed, each failure shown.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "driver/driver.hpp"

namespace mhc_test {

// Runs the driver over the problem; every failure is a test failure, and the
// runs and worst error / bound are printed under `name`.
template <class Driver, class Problem>
driver::Report expect_driver_passes(const Driver& d, const Problem& p, const std::string& name) {
  const driver::Report r = driver::check(d, p);
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  std::printf("[ measured ] %s: %s\n", name.c_str(), r.line().c_str());
  return r;
}

}  // namespace mhc_test
