// Each thread's most recent primitives (oneDNN's primitive cache), keyed by the
// problem they were made from (every field, the data pointers included) and the
// thread count: every face that runs the same problem again (a
// decode loop over the same buffers, aclnn's first phase asked again) reuses the
// plan instead of making it (mhc-bench decode, T=1). Per thread, so no lock, and a
// primitive is shared (shared_ptr) with the executors that hold it. A primitive
// holds no value read from the tensors, only forms of prepared weights (whose
// handle's id is in the key and whose views must not change): a hit is the same
// call as a miss.
#pragma once

#include <array>
#include <memory>

namespace mhc::ops {

template <class Problem, class Primitive, int kEntries = 4>
class PrimitiveCache {
 public:
  // The primitive of (problem, threads): the cached one, or make() stored in place
  // of the least recently used. same(a, b): a and b are the same problem.
  template <class Same, class Make>
  std::shared_ptr<const Primitive> get(const Problem& problem, int threads, Same same, Make make) {
    for (Entry& e : entries_)
      if (e.primitive && e.threads == threads && same(e.problem, problem)) {
        e.used = ++clock_;
        return e.primitive;
      }
    Entry* oldest = &entries_[0];
    for (Entry& e : entries_)
      if (e.used < oldest->used) oldest = &e;
    *oldest = {problem, threads, std::make_shared<const Primitive>(make()), ++clock_};
    return oldest->primitive;
  }

 private:
  struct Entry {
    Problem problem{};
    int threads = 0;
    std::shared_ptr<const Primitive> primitive;
    unsigned long long used = 0;
  };
  std::array<Entry, kEntries> entries_{};
  unsigned long long clock_ = 0;
};

}  // namespace mhc::ops
