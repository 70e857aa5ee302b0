// MhcPost and MhcPostBackward (SPEC §11), on every kernel family this build and CPU
// run: the same bits at 1, 2, 3, 7 threads; a token alone or anywhere in a batch;
// [B,S,..] as [T,..]; strided and broadcast views (staged) as contiguous.
#include <gtest/gtest.h>

#include <string>

#include "post_util.hpp"

namespace mhc_test::layer {
namespace {

// ------------------------------------------------------------------ determinism and invariance

TEST(PostDeterminism, ThreadCountsGiveTheSameBits) {
  const PCase cases[] = {{.B = 1, .S = 200, .N = 4, .D = 300, .dtype = DType::bf16, .h_res = true, .grad_x_fp32 = true, .seed = 3},
                         {.B = 3, .S = 41, .bsnd = true, .N = 5, .D = 2100, .dtype = DType::fp16, .h_res = true, .seed = 4},
                         {.B = 1, .S = 150, .N = 4, .D = 64, .dtype = DType::fp32, .h_res = false, .seed = 5}};
  for (const PCase& c : cases)
    for (mhc::Isa isa : available_families()) {
      Bag one = run_both(c, options_for(isa, 1));
      for (int threads : {2, 3, 7}) {
        Bag many = run_both(c, options_for(isa, threads));
        for (const std::string& name : kOutputs)
          EXPECT_EQ(many[name].raw(), one[name].raw()) << c.name() << " " << name << " " << family_name(isa) << " threads " << threads;
      }
    }
}

// A token alone, and at positions 0, 12, 13, 100, 199 of a batch of 200 (items of
// 13 tokens at N = 4, D = 300).
TEST(PostDeterminism, ATokenGivesTheSameBitsAloneAndAnywhereInABatch) {
  const PCase batch = {.B = 1, .S = 200, .N = 4, .D = 300, .dtype = DType::bf16, .h_res = true, .seed = 6};
  PCase alone = batch;
  alone.S = 1;
  for (mhc::Isa isa : available_families()) {
    Bag big = run_both(batch, options_for(isa, 2));
    for (int64_t pos : {0, 12, 13, 100, 199}) {
      SCOPED_TRACE(family_name(isa) + " token " + std::to_string(pos));
      Bag one = make_bag(alone);
      for (const char* name : {"x", "h_res", "h_out", "h_post", "grad_out"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) one[name].set(e, big[name].get(pos * per + e));
      }
      ASSERT_TRUE(forward(one, options_for(isa, 2)).ok());
      ASSERT_TRUE(backward(one, options_for(isa, 2)).ok());
      for (const std::string& name : kOutputs) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) ASSERT_EQ(one[name].bits(e), big[name].bits(pos * per + e)) << name;
      }
    }
  }
}

TEST(PostLayouts, BsndAndTndGiveTheSameBits) {
  const PCase bsnd = {.B = 3, .S = 5, .bsnd = true, .N = 4, .D = 70, .dtype = DType::fp16, .h_res = true, .seed = 8};
  PCase tnd = bsnd;
  tnd.bsnd = false;
  for (mhc::Isa isa : available_families()) {
    Bag a = run_both(bsnd, options_for(isa)), b = run_both(tnd, options_for(isa));
    for (const std::string& name : kOutputs) EXPECT_EQ(a[name].raw(), b[name].raw()) << name << " " << family_name(isa);
  }
}

TEST(PostLayouts, StridedAndBroadcastViewsGiveTheContiguousBits) {
  constexpr uint8_t kGap = 0x5a;
  const PCase c = {.B = 2, .S = 9, .bsnd = true, .N = 4, .D = 37, .dtype = DType::bf16, .h_res = true, .grad_x_fp32 = true, .seed = 9};
  Rng rng(10);
  for (mhc::Isa isa : available_families())
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      SCOPED_TRACE(family_name(isa) + " layout " + std::to_string(int(layout)));
      Bag want = run_both(c, options_for(isa));
      Bag b = make_bag(c);
      for (auto& [name, t] : b.t) t = relaid(t, layout, rng, kGap);
      const Bag before = b;
      ASSERT_TRUE(forward(b, options_for(isa)).ok());
      ASSERT_TRUE(backward(b, options_for(isa)).ok());
      for (const std::string& name : kOutputs) {
        EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
        EXPECT_TRUE(gaps_untouched(b[name], kGap)) << name;
      }
      for (const char* name : {"x", "h_res", "h_out", "h_post", "grad_out"})
        EXPECT_TRUE(b[name].buffer.snapshot() == before.t.at(name).buffer.snapshot()) << name << " (an input) changed";
    }
  // h_res and h_post broadcast over tokens (stride 0): each token as with token 0's.
  PCase t1 = c;
  t1.bsnd = false, t1.B = 1, t1.S = 18;
  Bag dense = make_bag(t1);
  Bag bcast = dense;
  for (int64_t t = 0; t < 18; ++t) {
    for (int64_t e = 0; e < 16; ++e) dense["h_res"].set(t * 16 + e, dense["h_res"].get(e));
    for (int64_t e = 0; e < 4; ++e) dense["h_post"].set(t * 4 + e, dense["h_post"].get(e));
  }
  bcast["h_res"].strides[0] = 0;
  bcast["h_post"].strides[0] = 0;
  ASSERT_TRUE(forward(dense, {}).ok() && backward(dense, {}).ok());
  ASSERT_TRUE(forward(bcast, {}).ok() && backward(bcast, {}).ok());
  for (const std::string& name : kOutputs) EXPECT_EQ(bcast[name].raw(), dense[name].raw()) << name << " (broadcast inputs)";
}

}  // namespace
}  // namespace mhc_test::layer
