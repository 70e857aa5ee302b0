// The test driver of an operator (benchdnn's model): a problem makes its tensors,
// the float64 reference is computed once, and the operator runs through each face
// (the C++ API, the C ABI, the aclnn API) on each kernel family in one process;
// every run is held to the reference's bounds and to the others' bits.
//
// An operator's driver (tests/driver/<operator>.hpp) is a class with
//   Bag make(const Problem&) const;                  inputs drawn, outputs filled with kOutputFill
//   Expectations reference(const Problem&, Bag&) const;   float64, from make()'s inputs
//   std::vector<Face> faces(const Problem&) const;   the faces that accept the problem
//   mhc::Status run(Face, const Problem&, Bag&, const mhc::Options&) const;   every call of the operator
//   std::vector<std::string> outputs(const Problem&, Face) const;   what a face writes: compared
//                                                    to the reference and bitwise between runs
//   static constexpr bool kSameBitsOnEveryFamily;    SPEC fixes the bits (else: across faces only)
// and optionally
//   void also_check(const Problem&, Face, Bag&, const std::string& where, Report&) const;
//                                                    its own checks of a run
// check() returns a Report (the worst error / bound of each output, the runs, the
// failures): the gtest suites expect it passed over their problem lists
// (cpp/driver_check.hpp), mhc-bench --check prints it for its shapes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "acl/acl.h"
#include "common/described_call.hpp"
#include "common/families.hpp"
#include "common/host_tensor.hpp"

namespace mhc_test::driver {


enum class Face { cpp, c, aclnn };
inline const char* face_name(Face f) { return f == Face::cpp ? "C++" : f == Face::c ? "C" : "aclnn"; }

// What one output must be. Elementwise when `bound` is given: |got[i] − want[i]| <=
// bound[i], plus, for an fp32 result stored in the 16-bit dtype `rounded_to`, half an
// ulp of it at max(|got[i]|, |want[i]|) + bound[i]; otherwise normwise:
// ||got − want|| / ||want|| <= normwise[k] over run k of `group` elements (0: the whole tensor).
struct Expectation {
  std::vector<double> want;
  std::vector<double> bound;
  DType rounded_to = DType::fp32;
  std::vector<double> normwise;
  int64_t group = 0;
};
inline Expectation elementwise(std::vector<double> want, std::vector<double> bound, DType rounded_to = DType::fp32) {
  Expectation e;
  e.want = std::move(want), e.bound = std::move(bound), e.rounded_to = rounded_to;
  return e;
}
inline Expectation normwise(std::vector<double> want, double bound) {
  Expectation e;
  e.want = std::move(want), e.normwise = {bound};
  return e;
}
// |got[i] − want[i]| <= relative · magnitude[i]: a sum whose terms may cancel far below
// their magnitude Σ|terms| (grad_alpha), whose rounding scales with the magnitude.
inline Expectation within_magnitude(std::vector<double> want, std::vector<double> magnitude, double relative) {
  for (double& m : magnitude) m *= relative;
  return elementwise(std::move(want), std::move(magnitude));
}
using Expectations = std::map<std::string, Expectation>;

// The worst error / bound of each output over every run, and what failed.
struct Report {
  std::map<std::string, double> worst;
  std::vector<std::string> runs;      // "family through face", in order
  std::vector<std::string> failures;  // empty: the problem passed
  void fail(std::string what) { failures.push_back(std::move(what)); }
  bool passed() const { return failures.empty(); }
  std::string line() const {
    std::string s = std::to_string(runs.size()) + " runs; error / bound:";
    char buf[96];
    for (const auto& [name, w] : worst) std::snprintf(buf, sizeof buf, " %s %.3g", name.c_str(), w), s += buf;
    return s;
  }
};

// ---------------------------------------------------------------- the faces' plumbing

// The C face: the operator's C function called by its description's argument names;
// `tensor_of` maps an argument name to a bag entry ("" or absent entry: NULL).
inline mhc::Status call_c(std::string_view op, Bag& b, const std::function<std::string(std::string_view)>& tensor_of,
                          const std::map<std::string, double>& reals, const std::map<std::string, int64_t>& ints,
                          const mhc::Options& options) {
  std::map<std::string, mhc_tensor> held;
  auto at = [&](const char* name) -> const mhc_tensor* {
    const std::string entry = tensor_of(name);
    if (entry.empty() || !b.t.count(entry) || !b[entry].present()) return nullptr;
    return &(held[name] = to_c(b[entry].view()));
  };
  auto real = [&](const char* name) { return reals.at(name); };
  auto integer = [&](const char* name) { return ints.at(name); };
  const mhc_options o = to_c(options);
  bool required_null = false;
  const int code = call_described(op, at, real, integer, &o, &required_null);
  if (code == 0) return mhc::Status();
  return mhc::Status(static_cast<mhc::StatusCode>(code), mhc::ErrorKind(mhc_last_error_kind()), mhc_last_error());
}

// The aclnn face: aclTensors over bag entries, both phases, the tensors freed.
class AclTensors {
 public:
  AclTensors() = default;
  AclTensors(const AclTensors&) = delete;
  AclTensors& operator=(const AclTensors&) = delete;
  ~AclTensors() {
    for (aclTensor* t : made_) (void)aclDestroyTensor(t);
  }
  // nullptr for an absent entry. `trailing_one`: the entry with a last dim of 1
  // added (CANN's [.., 1] for a per-token scalar).
  aclTensor* operator()(Bag& b, const std::string& entry, bool trailing_one = false) {
    if (!b.t.count(entry) || !b[entry].present()) return nullptr;
    Tensor& t = b[entry];
    Shape shape = t.shape, strides = t.strides;
    if (trailing_one) shape.push_back(1), strides.push_back(1);
    const Shape storage = {int64_t(t.buffer.elements())};
    aclTensor* made = aclCreateTensor(shape.data(), shape.size(), acl_dtype(t.dtype()), strides.data(), t.offset,
                                      ACL_FORMAT_ND, storage.data(), 1, t.buffer.bytes());
    made_.push_back(made);
    return made;
  }

 private:
  static aclDataType acl_dtype(DType d) {
    return d == DType::fp32 ? ACL_FLOAT : d == DType::fp16 ? ACL_FLOAT16 : ACL_BF16;
  }
  std::vector<aclTensor*> made_;
};

// Runs phase one's result: the workspace allocated, phase two called.
template <class Phase2>
mhc::Status run_aclnn(const char* op, aclnnStatus first, uint64_t workspace_bytes, aclOpExecutor* executor,
                      Phase2 second) {
  if (first != ACLNN_SUCCESS)
    return mhc::Status(mhc::StatusCode::invalid_argument, mhc::ErrorKind::none,
                       std::string(op) + " phase one: " + aclGetRecentErrMsg());
  std::vector<uint8_t> workspace(size_t(workspace_bytes) + 64);
  void* aligned = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
  const aclnnStatus s = second(workspace_bytes ? aligned : nullptr, workspace_bytes, executor, nullptr);
  if (s != ACLNN_SUCCESS)
    return mhc::Status(mhc::StatusCode::invalid_argument, mhc::ErrorKind::none,
                       std::string(op) + " phase two: " + aclGetRecentErrMsg());
  return mhc::Status();
}

// ---------------------------------------------------------------- the comparison

// One run's output against its expectation; failures name the run and the element
// (the first few of a tensor).
inline void compare(const std::string& name, const Tensor& got, const Expectation& e, const std::string& where,
                    Report& report) {
  if (size_t(got.numel()) != e.want.size()) {
    report.fail(where + " " + name + ": " + std::to_string(got.numel()) + " elements, the reference has " +
                std::to_string(e.want.size()));
    return;
  }
  double& worst = report.worst[name];
  char line[256];
  if (!e.bound.empty()) {
    int failures = 0;
    for (size_t i = 0; i < e.want.size(); ++i) {
      const double g = got.get(int64_t(i)), err = std::fabs(g - e.want[i]);
      const double at = std::max(std::fabs(g), std::fabs(e.want[i])) + e.bound[i];
      const double bound = e.bound[i] + (e.rounded_to == DType::fp32 ? 0.0 : 0.5 * ulp_of(e.rounded_to, at));
      worst = std::max(worst, bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0));
      if (!(err <= bound) && ++failures <= 3) {
        std::snprintf(line, sizeof line, "[%zu]: %.17g vs float64 %.17g, error %.3g > bound %.3g", i, g, e.want[i],
                      err, bound);
        report.fail(where + " " + name + line);
      }
    }
    if (failures > 3) report.fail(where + " " + name + ": " + std::to_string(failures) + " elements out of bounds");
    return;
  }
  const std::vector<double> all = got.values();
  const size_t group = e.group > 0 ? size_t(e.group) : e.want.size();
  for (size_t start = 0; start < e.want.size(); start += group) {
    const std::vector<double> g(all.begin() + start, all.begin() + start + group),
        w(e.want.begin() + start, e.want.begin() + start + group);
    const double err = normwise_relative_error(g, w), bound = e.normwise.at(start / group);
    worst = std::max(worst, err / bound);
    if (!(err <= bound)) {
      std::snprintf(line, sizeof line, " elements %zu..%zu: normwise relative error %.3g > %.3g", start,
                    start + group - 1, err, bound);
      report.fail(where + " " + name + line);
    }
  }
}

// The problem through every face on every family to check. aclnn takes no
// options: it runs the default family (MHC_ISA or the best), once.
template <class Driver, class Problem>
Report check(const Driver& driver, const Problem& p) {
  Report report;
  const Bag pristine = driver.make(p);  // every run starts from a copy of it
  Bag inputs = pristine;
  const Expectations expected = driver.reference(p, inputs);
  mhc::Isa default_family = mhc::Isa::reference;
  if (!mhc::isa_from_name(mhc::isa(), &default_family)) report.fail(std::string("unknown family ") + mhc::isa());
  std::map<std::string, std::vector<uint32_t>> first_bits;
  std::string first_where;
  for (mhc::Isa isa : families_under_test()) {
    std::map<std::string, std::vector<uint32_t>> family_bits;
    std::string family_where;
    for (Face face : driver.faces(p)) {
      if (face == Face::aclnn && isa != default_family) continue;
      const std::string where = std::string(mhc::isa_name(isa)) + " through " + face_name(face);
      report.runs.push_back(where);
      Bag b = pristine;
      const mhc::Status s = driver.run(face, p, b, options_for(isa));
      if (!s.ok()) {
        report.fail(where + ": " + s.message());
        continue;
      }
      if constexpr (requires { driver.also_check(p, face, b, where, report); })
        driver.also_check(p, face, b, where, report);
      auto& baseline = (Driver::kSameBitsOnEveryFamily ? first_bits : family_bits);
      std::string& baseline_where = (Driver::kSameBitsOnEveryFamily ? first_where : family_where);
      for (const std::string& name : driver.outputs(p, face)) {
        if (expected.count(name)) compare(name, b[name], expected.at(name), where, report);
        if (!baseline.count(name)) {
          baseline[name] = b[name].raw();
          baseline_where = where;
        } else if (baseline[name] != b[name].raw()) {
          report.fail(name + ": " + where + " differs bitwise from " + baseline_where);
        }
      }
    }
  }
  return report;
}

}  // namespace mhc_test::driver
