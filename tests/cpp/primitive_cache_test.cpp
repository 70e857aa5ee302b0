// The primitive cache (ops/primitive_cache.hpp) and MhcPre's use of it: the same
// problem gets the same primitive; any field of the problem that differs (a data
// pointer, a stride, an eps bit, the family, the thread count) gets another; the
// least recently used entry goes first; and a call that hits runs as one that
// misses (bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/problem.hpp"
#include "ops/pre/forward.hpp"
#include "ops/primitive_cache.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

struct Key {
  int value = 0;
};
bool same_key(const Key& a, const Key& b) { return a.value == b.value; }

TEST(PrimitiveCache, SameKeyAndThreadsHitOthersMissLeastRecentlyUsedGoesFirst) {
  mhc::ops::PrimitiveCache<Key, int, 2> cache;
  int made = 0;
  auto make = [&] { return ++made; };
  const auto a = cache.get({1}, 2, same_key, make);
  EXPECT_EQ(cache.get({1}, 2, same_key, make), a) << "the same key and thread count hit";
  EXPECT_EQ(made, 1);
  const auto b = cache.get({1}, 3, same_key, make);  // another thread count
  EXPECT_NE(b, a);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(cache.get({1}, 2, same_key, make), a);  // a is now the most recent
  cache.get({2}, 2, same_key, make);                // evicts b, the least recently used
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.get({1}, 2, same_key, make), a);
  EXPECT_NE(cache.get({1}, 3, same_key, make), b) << "b was evicted: made again";
  EXPECT_EQ(made, 4);
}

// A validated MhcPre problem over the operands of a Config.
mhc::core::ForwardProblem problem_of(Operands& o) {
  mhc::core::ForwardProblem p;
  EXPECT_TRUE(mhc::ops::pre::forward::validate(forward_inputs(o), forward_outputs(o), o.options, &p).ok());
  return p;
}

TEST(PrimitiveCache, MhcPreProblemsDifferingInAnyFieldGetTheirOwnPrimitive) {
  Config c;
  c.N = 4, c.D = 64, c.S = 3;
  Operands o = make_operands(c);
  const mhc::core::ForwardProblem base = problem_of(o);
  using mhc::ops::pre::forward::cached_primitive;
  const auto first = cached_primitive(base, 2);
  EXPECT_EQ(cached_primitive(base, 2), first);
  EXPECT_NE(cached_primitive(base, 1), first) << "thread count";
  auto differs = [&](auto change, const char* what) {
    mhc::core::ForwardProblem other = base;
    change(other);
    EXPECT_FALSE(base == other) << what;
    EXPECT_NE(cached_primitive(other, 2), first) << what;
  };
  differs([](auto& p) { p.x.data = static_cast<char*>(p.x.data) + 2; }, "x's data");
  differs([](auto& p) { p.h_in.stride[1] += 1; }, "h_in's stride");
  differs([](auto& p) { p.hc_eps = std::nextafter(p.hc_eps, 1.0); }, "hc_eps");
  differs([](auto& p) { p.norm_eps = -p.norm_eps; }, "norm_eps negated");
  differs([](auto& p) { p.hf32 = !p.hf32; }, "hf32");
  differs([](auto& p) { p.isa = p.isa == mhc::Isa::reference ? mhc::Isa::portable : mhc::Isa::reference; }, "family");
  differs([](auto& p) { p.gamma.data = nullptr; }, "gamma absent");
}

// Repeated calls on the same buffers (hits) give the bits of the first (a miss)
// and of a call on copies at other addresses (a miss), on every family.
TEST(PrimitiveCache, AHitRunsAsAMiss) {
  for (mhc::Isa isa : available_families()) {
    Config c;
    c.N = 4, c.D = 100, c.S = 5, c.seed = 3;
    Operands o = make_operands(c);
    o.options.isa = isa;
    ASSERT_TRUE(mhc::pre_forward(forward_inputs(o), forward_outputs(o), o.options).ok());
    const std::vector<uint32_t> first = o.h_in.raw(), mix = o.h_mix.raw();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(mhc::pre_forward(forward_inputs(o), forward_outputs(o), o.options).ok());
      EXPECT_EQ(o.h_in.raw(), first) << mhc::isa_name(isa);
      EXPECT_EQ(o.h_mix.raw(), mix) << mhc::isa_name(isa);
    }
    Operands elsewhere = make_operands(c);
    elsewhere.options.isa = isa;
    ASSERT_TRUE(mhc::pre_forward(forward_inputs(elsewhere), forward_outputs(elsewhere), elsewhere.options).ok());
    EXPECT_EQ(elsewhere.h_in.raw(), first) << mhc::isa_name(isa);
  }
}

}  // namespace
}  // namespace mhc_test
