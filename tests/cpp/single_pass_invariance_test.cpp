// DeepSeek-V4.1's operators (SPEC §14) on every kernel family this build and CPU
// run: the same bits at 1, 2, 3 threads; a token alone or anywhere in a batch;
// [B,S,..] as [T,..]; flat h_res [.., N*N] as [.., N, N]; strided views as
// contiguous.
#include <gtest/gtest.h>

#include <string>

#include "single_pass_util.hpp"

namespace mhc_test::single_pass {
namespace {

TEST(SinglePassDeterminism, ThreadCountsGiveTheSameBits) {
  for (bool first : {false, true}) {
    const SCase c = {.B = 1, .S = 150, .N = 4, .D = 64, .dtype = DType::bf16, .gamma = true, .first_site = first,
                     .seed = 300};
    for (mhc::Isa isa : available_families()) {
      Bag one = run_case(c, options_for(c, isa, 1));
      for (int threads : {2, 3}) {
        Bag many = run_case(c, options_for(c, isa, threads));
        for (const std::string& name : all_outputs(c))
          EXPECT_EQ(many[name].raw(), one[name].raw()) << name << " " << family_name(isa) << " threads " << threads;
      }
    }
  }
}

TEST(SinglePassDeterminism, ATokensOutputsAreTheSameAloneAndAnywhereInABatch) {
  const SCase batch = {.B = 1, .S = 130, .N = 4, .D = 48, .dtype = DType::bf16, .seed = 301};
  SCase alone = batch;
  alone.S = 1;
  for (mhc::Isa isa : available_families()) {
    Bag big = run_case(batch, options_for(batch, isa, 2));
    for (int64_t pos : {0, 15, 64, 129}) {
      SCOPED_TRACE(family_name(isa) + " token " + std::to_string(pos));
      Bag one = make_bag(alone);
      for (const char* name : {"x", "pre_mix", "grad_h_in", "grad_h_pre", "grad_h_post", "grad_h_res"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) one[name].set(e, big[name].get(pos * per + e));
      }
      for (const char* name : {"phi", "alpha", "bias"}) one[name] = big[name];
      run_both(one, alone, options_for(alone, isa, 2));
      for (const char* name : {"h_in", "h_pre", "h_post", "h_res", "inv_rms", "h_mix", "grad_x", "grad_pre_mix"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) ASSERT_EQ(one[name].bits(e), big[name].bits(pos * per + e)) << name;
      }
    }
  }
}

TEST(SinglePassLayouts, BsndTndAndFlatResidualGiveTheSameBits) {
  const SCase bsnd = {.B = 3, .S = 7, .bsnd = true, .N = 4, .D = 33, .dtype = DType::fp16, .I = 5, .seed = 302};
  SCase tnd = bsnd, flat = bsnd;
  tnd.bsnd = false;
  flat.flat = true;
  for (mhc::Isa isa : available_families()) {
    Bag a = run_case(bsnd, options_for(bsnd, isa)), b = run_case(tnd, options_for(tnd, isa)),
        f = run_case(flat, options_for(flat, isa));
    for (const std::string& name : all_outputs(bsnd)) {
      EXPECT_EQ(a[name].raw(), b[name].raw()) << name << " BSND vs TND " << family_name(isa);
      EXPECT_EQ(a[name].raw(), f[name].raw()) << name << " [..,N,N] vs [..,N*N] " << family_name(isa);
    }
  }
}

TEST(SinglePassLayouts, StridedViewsGiveTheContiguousBits) {
  constexpr uint8_t kGap = 0x5a;
  const SCase c = {.B = 2, .S = 11, .bsnd = true, .N = 4, .D = 24, .dtype = DType::bf16, .I = 4, .gamma = true,
                   .grad_x_post = true, .seed = 303};
  Rng rng(304);
  for (mhc::Isa isa : available_families())
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      SCOPED_TRACE(family_name(isa) + " layout " + std::to_string(int(layout)));
      Bag want = run_case(c, options_for(c, isa));
      Bag b = make_bag(c);
      for (auto& [name, t] : b.t) t = relaid(t, layout, rng, kGap);
      run_both(b, c, options_for(c, isa));
      for (const std::string& name : all_outputs(c)) {
        EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
        EXPECT_TRUE(gaps_untouched(b[name], kGap)) << name;
      }
    }
}

TEST(CollapseDeterminism, ThreadCountsAndStridedViewsGiveTheSameBits) {
  const driver::CollapseCase c = {.B = 3, .S = 50, .bsnd = true, .N = 4, .D = 72, .dtype = DType::bf16, .seed = 305};
  const driver::CollapseDriver d;
  Rng rng(306);
  Bag want = d.make(c);
  mhc::Options o;
  o.num_threads = 1;
  ASSERT_TRUE(d.run(driver::Face::cpp, c, want, o).ok());
  for (mhc::Isa isa : available_families())
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(family_name(isa) + " threads " + std::to_string(threads));
      o.isa = isa, o.num_threads = threads;
      Bag b = d.make(c);
      if (threads == 3)
        for (auto& [name, t] : b.t) t = relaid(t, Layout::every_other, rng);
      ASSERT_TRUE(d.run(driver::Face::cpp, c, b, o).ok());
      for (const char* name : {"h", "grad_x", "grad_pre_mix"}) EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
    }
}

}  // namespace
}  // namespace mhc_test::single_pass
