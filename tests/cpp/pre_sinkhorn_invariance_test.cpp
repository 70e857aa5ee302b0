// MhcPreSinkhorn and its backward (SPEC §12), on every kernel family this build and
// CPU run: the same bits at 1, 2, 3, 7 threads; a token alone or anywhere in a
// batch; [B,S,..] as [T,..]; flat h_res [.., N*N] as [.., N, N]; CANN's inv_rms
// [.., 1]; strided views as contiguous.
#include <gtest/gtest.h>

#include <string>

#include "pre_sinkhorn_util.hpp"

namespace mhc_test::layer {
namespace {

// ------------------------------------------------------------------ determinism and invariance

TEST(FusedDeterminism, ThreadCountsGiveTheSameBits) {
  const FCase c = {.B = 1, .S = 150, .N = 4, .D = 64, .dtype = DType::bf16, .I = 20, .pitch = 8, .seed = 20};
  for (mhc::Isa isa : available_families()) {
    Bag one = run_fused(c, options_for(c, isa, 1));
    for (int threads : {2, 3, 7}) {
      Bag many = run_fused(c, options_for(c, isa, threads));
      for (const std::string& name : all_outputs())
        EXPECT_EQ(many[name].raw(), one[name].raw()) << name << " " << family_name(isa) << " threads " << threads;
    }
  }
}

TEST(FusedDeterminism, ATokensOutputsAreTheSameAloneAndAnywhereInABatch) {
  const FCase batch = {.B = 1, .S = 130, .N = 4, .D = 64, .dtype = DType::bf16, .I = 20, .pitch = 4, .seed = 21};
  FCase alone = batch;
  alone.S = 1;
  for (mhc::Isa isa : available_families()) {
    Bag big = run_fused(batch, options_for(batch, isa, 2));
    for (int64_t pos : {0, 15, 64, 129}) {
      SCOPED_TRACE(family_name(isa) + " token " + std::to_string(pos));
      Bag one = make_bag(alone);
      for (const char* name : {"x", "grad_h_in", "grad_h_post", "grad_h_res"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) one[name].set(e, big[name].get(pos * per + e));
      }
      for (const char* name : {"phi", "alpha", "bias"}) one[name] = big[name];
      ASSERT_TRUE(fused_forward(one, alone, options_for(alone, isa, 2)).ok());
      ASSERT_TRUE(fused_backward(one, options_for(alone, isa, 2)).ok());
      for (const char* name : {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "grad_x"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) ASSERT_EQ(one[name].bits(e), big[name].bits(pos * per + e)) << name;
      }
      for (const char* name : {"norm_out", "sum_out"}) {  // [2I][T][per]
        const int64_t per = one[name].numel() / 40;
        for (int64_t k = 0; k < 40; ++k)
          for (int64_t e = 0; e < per; ++e)
            ASSERT_EQ(one[name].bits(k * per + e), big[name].bits((k * 130 + pos) * per + e)) << name;
      }
    }
  }
}

TEST(FusedLayouts, BsndTndAndFlatResidualGiveTheSameBits) {
  const FCase bsnd = {.B = 3, .S = 7, .bsnd = true, .N = 4, .D = 33, .dtype = DType::fp16, .I = 5, .pitch = 8, .seed = 30};
  FCase tnd = bsnd, flat = bsnd;
  tnd.bsnd = false;
  flat.flat = true;
  for (mhc::Isa isa : available_families()) {
    Bag a = run_fused(bsnd, options_for(bsnd, isa)), b = run_fused(tnd, options_for(tnd, isa)),
        f = run_fused(flat, options_for(flat, isa));
    for (const std::string& name : all_outputs()) {
      EXPECT_EQ(a[name].raw(), b[name].raw()) << name << " BSND vs TND " << family_name(isa);
      EXPECT_EQ(a[name].raw(), f[name].raw()) << name << " [..,N,N] vs [..,N*N] " << family_name(isa);
    }
  }
}

// CANN's inv_rms [.., 1] (SPEC §12) as the pre operators' [..]: the same bits.
TEST(FusedLayouts, CannsUnitInvRmsDimGivesTheSameBits) {
  const FCase c = {.B = 2, .S = 5, .bsnd = true, .N = 4, .D = 16, .dtype = DType::bf16, .I = 3, .pitch = 4, .seed = 33};
  for (mhc::Isa isa : available_families()) {
    Bag want = run_fused(c, options_for(c, isa));
    Bag b = make_bag(c);
    b["inv_rms"].shape = {2, 5, 1};
    b["inv_rms"].strides = {5, 1, 1};
    const mhc::Status s = fused_forward(b, c, options_for(c, isa));
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(fused_backward(b, options_for(c, isa)).ok());
    for (const std::string& name : all_outputs()) EXPECT_EQ(b[name].raw(), want[name].raw()) << name << " " << family_name(isa);
  }
}

TEST(FusedLayouts, StridedViewsGiveTheContiguousBits) {
  constexpr uint8_t kGap = 0x5a;
  const FCase c = {.B = 2, .S = 11, .bsnd = true, .N = 4, .D = 24, .dtype = DType::bf16, .I = 4, .pitch = 4, .seed = 31};
  Rng rng(32);
  for (mhc::Isa isa : available_families())
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      SCOPED_TRACE(family_name(isa) + " layout " + std::to_string(int(layout)));
      Bag want = run_fused(c, options_for(c, isa));
      Bag b = make_bag(c);
      for (auto& [name, t] : b.t)
        if (name != "norm_out" && name != "sum_out" && name.rfind("u_", 0) != 0) t = relaid(t, layout, rng, kGap);
      ASSERT_TRUE(fused_forward(b, c, options_for(c, isa)).ok());
      ASSERT_TRUE(fused_backward(b, options_for(c, isa)).ok());
      for (const std::string& name : all_outputs()) {
        EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
        EXPECT_TRUE(gaps_untouched(b[name], kGap) || name == "norm_out" || name == "sum_out") << name;
      }
    }
}

}  // namespace
}  // namespace mhc_test::layer
