// MhcSinkhorn and MhcSinkhornBackward (SPEC §10), on every kernel family this build
// and CPU run: bitwise identical outputs at 1, 2, 3, 7 threads; a token alone or
// anywhere in a batch; [B,S,N,N] as [T,N,N]; strided and broadcast views (staged)
// as contiguous.
#include <gtest/gtest.h>

#include <string>

#include "sinkhorn_util.hpp"

namespace mhc_test::layer {
namespace {

// ------------------------------------------------------------------ determinism and invariance

TEST(SinkhornDeterminism, ThreadCountsGiveTheSameBits) {
  const SCase c = {.B = 1, .S = 300, .N = 4, .I = 20, .eps = 1e-6, .pitch = 8, .scale = 2.0, .seed = 31};
  const SCase c7 = {.B = 3, .S = 67, .bsnd = true, .N = 7, .I = 4, .eps = 1e-6, .pitch = 7, .scale = 2.0, .seed = 32};
  for (const SCase& k : {c, c7})
    for (mhc::Isa isa : available_families()) {
      Bag one = run_all(k, options_for(isa, 1));
      for (int threads : {2, 3, 7}) {
        Bag many = run_all(k, options_for(isa, threads));
        for (const std::string& name : outputs_of(k))
          EXPECT_EQ(many[name].raw(), one[name].raw())
              << name << " " << family_name(isa) << " num_threads " << threads << " vs 1";
      }
    }
}

// A token's outputs, alone (T = 1) and at positions 0, 15, 64, 130, 149 of a batch
// of 150 (lane blocks, items of 64, the short last block).
TEST(SinkhornDeterminism, ATokenGivesTheSameBitsAloneAndAnywhereInABatch) {
  const SCase batch = {.B = 1, .S = 150, .N = 4, .I = 20, .eps = 1e-6, .pitch = 8, .scale = 2.0, .seed = 40};
  SCase alone = batch;
  alone.S = 1;
  const int64_t NN = 16, P = 8, I2 = 40;
  for (mhc::Isa isa : available_families()) {
    const mhc::Options o = options_for(isa, 2);
    Bag big = make_bag(batch);
    Rng rng(77);
    fill_normal(big["z"], rng, 2.0);
    const Bag pristine = big;
    ASSERT_TRUE(forward(big, batch, o).ok());
    ASSERT_TRUE(backward_from_caches(big, o).ok());
    ASSERT_TRUE(backward_from_z(big, batch, o).ok());
    for (int64_t pos : {0, 15, 64, 130, 149}) {
      SCOPED_TRACE(family_name(isa) + " token " + std::to_string(pos));
      Bag one = make_bag(alone);
      for (int64_t e = 0; e < NN; ++e) {
        one["z"].set(e, pristine.t.at("z").get(pos * NN + e));
        one["grad_h_res"].set(e, pristine.t.at("grad_h_res").get(pos * NN + e));
      }
      ASSERT_TRUE(forward(one, alone, o).ok());
      ASSERT_TRUE(backward_from_caches(one, o).ok());
      ASSERT_TRUE(backward_from_z(one, alone, o).ok());
      for (const char* name : {"h_res", "grad_z", "grad_z_from_z"})
        for (int64_t e = 0; e < NN; ++e) ASSERT_EQ(one[name].bits(e), big[name].bits(pos * NN + e)) << name;
      for (int64_t k = 0; k < I2; ++k)
        for (int64_t e = 0; e < 4 * P; ++e)
          ASSERT_EQ(one["norm_out"].bits(k * 4 * P + e), big["norm_out"].bits((k * 150 + pos) * 4 * P + e));
      for (int64_t k = 0; k < I2; ++k)
        for (int64_t e = 0; e < P; ++e)
          ASSERT_EQ(one["sum_out"].bits(k * P + e), big["sum_out"].bits((k * 150 + pos) * P + e));
    }
  }
}

TEST(SinkhornLayouts, BsnnAndTnnGiveTheSameBits) {
  const SCase bsnd = {.B = 3, .S = 7, .bsnd = true, .N = 5, .I = 6, .eps = 1e-6, .pitch = 8, .scale = 1.5, .seed = 50};
  SCase tnd = bsnd;
  tnd.bsnd = false;
  for (mhc::Isa isa : available_families()) {
    Bag a = run_all(bsnd, options_for(isa)), b = run_all(tnd, options_for(isa));
    for (const std::string& name : outputs_of(bsnd)) EXPECT_EQ(a[name].raw(), b[name].raw()) << name << " " << family_name(isa);
  }
}

// Non-contiguous z, h_res, grad_h_res, grad_z (the caches are contiguous by rule):
// the contiguous bits, nothing written between the elements, inputs unchanged.
TEST(SinkhornLayouts, StridedAndBroadcastViewsGiveTheContiguousBits) {
  const SCase c = {.B = 2, .S = 37, .bsnd = true, .N = 4, .I = 5, .eps = 1e-6, .pitch = 4, .scale = 1.5, .seed = 60};
  constexpr uint8_t kGap = 0x5a;
  Rng rng(61);
  for (mhc::Isa isa : available_families())
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      SCOPED_TRACE(family_name(isa) + " layout " + std::to_string(int(layout)));
      Bag want = run_all(c, options_for(isa));
      Bag b = make_bag(c);
      for (const char* name : {"z", "grad_h_res", "h_res", "grad_z", "grad_z_from_z"}) b[name] = relaid(b[name], layout, rng, kGap);
      const Bag before = b;
      ASSERT_TRUE(forward(b, c, options_for(isa)).ok());
      ASSERT_TRUE(backward_from_caches(b, options_for(isa)).ok());
      ASSERT_TRUE(backward_from_z(b, c, options_for(isa)).ok());
      for (const std::string& name : outputs_of(c)) EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
      for (const char* name : {"z", "grad_h_res", "h_res", "grad_z", "grad_z_from_z"}) EXPECT_TRUE(gaps_untouched(b[name], kGap)) << name;
      for (const char* name : {"z", "grad_h_res"}) EXPECT_TRUE(b[name].buffer.snapshot() == before.t.at(name).buffer.snapshot()) << name;
    }
  // z broadcast over tokens (stride 0): every token is token 0.
  SCase one = c;
  one.B = 1, one.S = 1, one.bsnd = false;
  Bag single = run_all(one, options_for(mhc::Isa::automatic));
  SCase many = c;
  many.bsnd = false, many.B = 1, many.S = 40;
  Bag b = make_bag(many);
  Tensor z1 = single["z"];
  b["z"] = z1;
  b["z"].shape = {40, 4, 4};
  b["z"].strides = {0, 4, 1};
  Tensor g1 = single["grad_h_res"];
  b["grad_h_res"] = g1;
  b["grad_h_res"].shape = {40, 4, 4};
  b["grad_h_res"].strides = {0, 4, 1};
  ASSERT_TRUE(forward(b, many, {}).ok());
  ASSERT_TRUE(backward_from_caches(b, {}).ok());
  ASSERT_TRUE(backward_from_z(b, many, {}).ok());
  for (int64_t t = 0; t < 40; ++t)
    for (int64_t e = 0; e < 16; ++e) {
      ASSERT_EQ(b["h_res"].bits(t * 16 + e), single["h_res"].bits(e));
      ASSERT_EQ(b["grad_z"].bits(t * 16 + e), single["grad_z"].bits(e));
      ASSERT_EQ(b["grad_z_from_z"].bits(t * 16 + e), single["grad_z_from_z"].bits(e));
    }
}

}  // namespace
}  // namespace mhc_test::layer
