// The hook by which an operator's folder hands the C++ face (faces/cpp_api.cpp) its
// validation and run, under its name in src/description/operators.def.
#pragma once

#include "mhc/mhc.hpp"

// ops::operators::<name>: Problem, validate(in, out, options, &problem), run(problem, threads).
#define MHC_DESCRIBED_OPERATOR(name, ProblemType, Cpp, validate_fn, run_fn)                             \
  namespace mhc::ops::operators {                                                                       \
  struct name {                                                                                         \
    using Problem = ProblemType;                                                                        \
    static Status validate(const Cpp##Inputs& in, const Cpp##Outputs& out, const Options& o, Problem* p) { \
      return validate_fn(in, out, o, p);                                                                \
    }                                                                                                   \
    static Status run(const Problem& p, int num_threads) { return run_fn(p, num_threads); }            \
  };                                                                                                    \
  }
