// MhcPreSinkhorn and its backward (SPEC §12) at the edges and on invalid calls,
// through the C++ and the C face:
//   - an empty batch (the weight gradients zeros, as the unfused chain writes them);
//   - every validation rule with its message, nothing written on an error;
//     permutation rows (F = 2N + N!) rejected;
//   - the C face: null required pointers named, results equal to the C++ face.
#include <gtest/gtest.h>

#include <cstring>

#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pre_sinkhorn_util.hpp"

namespace mhc_test::layer {
namespace {

TEST(FusedEdges, EmptyBatchSucceedsAndWritesNothing) {
  for (bool bsnd : {false, true}) {
    const FCase c = {.B = bsnd ? 2 : 1, .S = 0, .bsnd = bsnd, .N = 4, .D = 8, .dtype = DType::bf16, .I = 3, .pitch = 4, .seed = 1};
    Bag b = make_bag(c);
    const auto before = b.snapshot();
    for (mhc::Isa isa : available_families()) {
      EXPECT_TRUE(fused_forward(b, c, options_for(c, isa)).ok());
      const mhc::Status s = fused_backward(b, options_for(c, isa));
      EXPECT_TRUE(s.ok()) << s.message();
    }
    // grad_phi, grad_alpha, grad_bias are sums over no tokens: zeros, as pre_backward writes them.
    Bag u = make_bag(c);
    const mhc::PreBackwardInputs bin{u["x"].view(), u["phi"].view(), u["alpha"].view(), u["grad_h_in"].view(),
                                     u["grad_h_post"].view(), u["grad_h_res"].view(), u["inv_rms"].view(),
                                     u["h_mix"].view(), u["h_pre"].view(), u["h_post"].view(), std::nullopt, std::nullopt};
    ASSERT_TRUE(mhc::pre_backward(bin, {u["grad_x"].view(), u["grad_phi"].view(), u["grad_alpha"].view(), u["grad_bias"].view(), std::nullopt}, {}).ok());
    // A regression test: at 31e625f ops/pre_sinkhorn's run_backward returned before
    // pre_backward when T == 0, leaving these three as they were (the 0xa5 fill)
    // where the chain SPEC §12 defines writes zeros (fixed in a5c0da3).
    for (const char* name : {"grad_phi", "grad_alpha", "grad_bias"})
      EXPECT_EQ(b[name].raw(), u[name].raw())
          << "BUG: " << name << " of an empty batch is not written by pre_sinkhorn_backward; the unfused chain writes 0";
    for (const char* name : {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "norm_out", "sum_out", "grad_x"})
      EXPECT_TRUE(b[name].buffer.snapshot() == before[std::distance(b.t.begin(), b.t.find(name))]) << name;
  }
}

// ------------------------------------------------------------------ validation

// Base: x [B,S,N,D] = [2,3,4,8] bf16, phi [24,32], alpha [3], bias [24], I = 3,
// h_res [2,3,4,4], norm_out [6,2,3,4,4], sum_out [6,2,3,4].
const FCase kBase = {.B = 2, .S = 3, .bsnd = true, .N = 4, .D = 8, .dtype = DType::bf16, .I = 3, .pitch = 4, .seed = 7};

struct FwdCall {
  Bag bag;
  mhc::PreSinkhornForwardInputs in;
  mhc::PreSinkhornForwardOutputs out;
  mhc::Options options;
  static std::unique_ptr<FwdCall> make() {
    auto k = std::make_unique<FwdCall>();
    Bag& b = k->bag;
    b = make_bag(kBase);
    k->in = {b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), kBase.I};
    k->out = {b["h_in"].view(),  b["h_post"].view(), b["h_res"].view(),    b["inv_rms"].view(),
              b["h_mix"].view(), b["h_pre"].view(),  b["norm_out"].view(), b["sum_out"].view()};
    return k;
  }
  mhc::Status run() const { return mhc::pre_sinkhorn_forward(in, out, options); }
  int run_c() const {
    const mhc_options o = to_c(options);
    const CTensor x(in.x), phi(in.phi), alpha(in.alpha), bias(in.bias), h_in(out.h_in), h_post(out.h_post),
        h_res(out.h_res), inv_rms(out.inv_rms), h_mix(out.h_mix), h_pre(out.h_pre), norm(out.norm_out), sum(out.sum_out);
    return mhc_pre_sinkhorn_forward(x.ptr, phi.ptr, alpha.ptr, bias.ptr, in.num_iters, h_in.ptr, h_post.ptr, h_res.ptr,
                                    inv_rms.ptr, h_mix.ptr, h_pre.ptr, norm.ptr, sum.ptr, &o);
  }
};

struct BwdCall {
  Bag bag;
  mhc::PreSinkhornBackwardInputs in;
  mhc::PreSinkhornBackwardOutputs out;
  mhc::Options options;
  static std::unique_ptr<BwdCall> make() {
    auto k = std::make_unique<BwdCall>();
    Bag& b = k->bag;
    b = make_bag(kBase);
    EXPECT_TRUE(fused_forward(b, kBase, {}).ok());
    k->in = {b["grad_h_in"].view(), b["grad_h_post"].view(), b["grad_h_res"].view(), b["x"].view(),
             b["phi"].view(),       b["alpha"].view(),       b["bias"].view(),       b["h_pre"].view(),
             b["h_mix"].view(),     b["inv_rms"].view(),     b["sum_out"].view(),    b["norm_out"].view()};
    k->out = {b["grad_x"].view(), b["grad_phi"].view(), b["grad_alpha"].view(), b["grad_bias"].view()};
    return k;
  }
  mhc::Status run() const { return mhc::pre_sinkhorn_backward(in, out, options); }
  int run_c() const {
    const mhc_options o = to_c(options);
    const CTensor ghi(in.grad_h_in), ghp(in.grad_h_post), ghr(in.grad_h_res), x(in.x), phi(in.phi), alpha(in.alpha),
        bias(in.bias), h_pre(in.h_pre), h_mix(in.h_mix), inv_rms(in.inv_rms), sum(in.sum_out), norm(in.norm_out),
        gx(out.grad_x), gphi(out.grad_phi), galpha(out.grad_alpha), gbias(out.grad_bias);
    return mhc_pre_sinkhorn_backward(ghi.ptr, ghp.ptr, ghr.ptr, x.ptr, phi.ptr, alpha.ptr, bias.ptr, h_pre.ptr,
                                     h_mix.ptr, inv_rms.ptr, sum.ptr, norm.ptr, gx.ptr, gphi.ptr, galpha.ptr, gbias.ptr, &o);
  }
};

std::vector<LayerRule<FwdCall>> forward_rules() {
  using K = FwdCall;
  return {
      null_rule<K>("x_null_data", [](K& k) { k.in.x.data = nullptr; }, "x: data pointer is null"),
      shape_rule<K>("alpha_2_entries", [](K& k) {
        k.in.alpha = reshaped(k.in.alpha, {2});
        k.in.phi = reshaped(k.in.phi, {8, 32});
        k.in.bias = reshaped(k.in.bias, {8});
        k.out.h_mix = reshaped(*k.out.h_mix, {2, 3, 8});
      }, "alpha: expected [3] (the fused pair has the residual branch), got [2]"),
      null_rule<K>("caches_without_inv_rms", [](K& k) { k.out.inv_rms.reset(); }, "inv_rms: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_h_mix", [](K& k) { k.out.h_mix.reset(); }, "h_mix: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_h_pre", [](K& k) { k.out.h_pre.reset(); }, "h_pre: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_norm_out", [](K& k) { k.out.norm_out.reset(); }, "norm_out: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_sum_out", [](K& k) { k.out.sum_out.reset(); }, "sum_out: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("only_the_sinkhorn_caches", [](K& k) { k.out.inv_rms.reset(); k.out.h_mix.reset(); k.out.h_pre.reset(); }, "inv_rms: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      value_rule<K>("num_iters_0", [](K& k) { k.in.num_iters = 0; }, "num_iters: expected >= 1, got 0"),
      value_rule<K>("hc_eps_nan", [](K& k) { k.options.hc_eps = kNaN; }, "hc_eps: expected a finite value >= 0, got nan"),
      value_rule<K>("hc_eps_negative", [](K& k) { k.options.hc_eps = -1e-3; }, "hc_eps: expected a finite value >= 0, got -0.001000"),
      value_rule<K>("norm_eps_inf", [](K& k) { k.options.norm_eps = INFINITY; }, "norm_eps: expected a finite value >= 0, got inf"),
      shape_rule<K>("h_res_N_3", [](K& k) { k.out.h_res = k.bag.add(DType::fp32, {2, 3, 3, 3}); }, "h_res: expected [B,S,N,N]=[2,3,4,4] or [B,S,R]=[2,3,16], got [2,3,3,3]"),
      shape_rule<K>("norm_out_N_mismatch", [](K& k) { k.out.norm_out = k.bag.add(DType::fp32, {6, 2, 3, 5, 5}); }, "norm_out: expected [2I,B,S,N,P] with N=4, P>=N, 2I=6, token dims [2,3], got [6,2,3,5,5]"),
      shape_rule<K>("norm_out_2I_not_num_iters", [](K& k) { k.out.norm_out = k.bag.add(DType::fp32, {8, 2, 3, 4, 4}); }, "norm_out: expected [2I,B,S,N,P] with N=4, P>=N, 2I=6, token dims [2,3], got [8,2,3,4,4]"),
      shape_rule<K>("sum_out_pitch_differs", [](K& k) { k.out.sum_out = k.bag.add(DType::fp32, {6, 2, 3, 8}); }, "sum_out: expected [2I,B,S,P] with N=4, P=4, 2I=6, token dims [2,3], got [6,2,3,8]"),
      layout_rule<K>("sum_out_not_contiguous", [](K& k) { k.out.sum_out = restrided(*k.out.sum_out, {48, 24, 8, 2}); }, "sum_out: expected a contiguous tensor (the caches' layout is the library's), got strides [48,24,8,2]"),
      layout_rule<K>("norm_out_overlaps_h_mix", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {6 * 2 * 3 * 4 * 4});
        k.out.norm_out = reshaped(pool, {6, 2, 3, 4, 4});
        k.out.h_mix = reshaped(pool, {2, 3, 24});
      }, "norm_out: output memory overlaps output h_mix"),
      // sum_out's 576 bytes hold x's 384 at their start: x's own buffer is too short for them,
      // and a view past its end overlapped whatever the allocator had put there (h_mix at times).
      layout_rule<K>("sum_out_overlaps_x", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {6, 2, 3, 4});
        std::memcpy(pool.data, k.in.x.data, 2 * 3 * 4 * 8 * sizeof(uint16_t));
        k.in.x.data = pool.data;
        k.out.sum_out = pool;
      }, "sum_out: output memory overlaps input x"),
      layout_rule<K>("h_res_overlaps_h_post", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {96});
        k.out.h_res = reshaped(pool, {2, 3, 4, 4});
        k.out.h_post = reshaped(pool, {2, 3, 4});
      }, "h_res: output memory overlaps output h_post"),
  };
}

std::vector<LayerRule<BwdCall>> backward_rules() {
  using K = BwdCall;
  return {
      null_rule<K>("grad_h_in_null_data", [](K& k) { k.in.grad_h_in.data = nullptr; }, "grad_h_in: data pointer is null"),
      shape_rule<K>("bwd_alpha_2_entries", [](K& k) {
        k.in.alpha = reshaped(k.in.alpha, {2});
        k.in.phi = reshaped(k.in.phi, {8, 32});
        k.in.bias = reshaped(k.in.bias, {8});
        k.in.h_mix = reshaped(k.in.h_mix, {2, 3, 8});
        k.out.grad_phi = reshaped(k.out.grad_phi, {8, 32});
        k.out.grad_alpha = reshaped(k.out.grad_alpha, {2});
        k.out.grad_bias = reshaped(k.out.grad_bias, {8});
      }, "alpha: expected [3] (the fused pair has the residual branch), got [2]"),
      shape_rule<K>("bias_F_plus_1", [](K& k) { k.in.bias = k.bag.add(DType::fp32, {25}); }, "bias: expected [F]=[24], got [25]"),
      dtype_rule<K>("bias_bf16", [](K& k) { k.in.bias.dtype = DType::bf16; }, "bias: expected dtype fp32, got bf16"),
      shape_rule<K>("grad_h_res_N_5", [](K& k) { k.in.grad_h_res = k.bag.add(DType::fp32, {2, 3, 5, 5}); }, "grad_h_res: expected [B,S,N,N]=[2,3,4,4] or [B,S,R]=[2,3,16], got [2,3,5,5]"),
      shape_rule<K>("grad_h_post_N_5", [](K& k) { k.in.grad_h_post = k.bag.add(DType::fp32, {2, 3, 5}); }, "grad_h_post: expected [B,S,N]=[2,3,4], got [2,3,5]"),
      shape_rule<K>("bwd_norm_out_N_mismatch", [](K& k) { k.in.norm_out = k.bag.add(DType::fp32, {6, 2, 3, 5, 5}); }, "norm_out: expected [2I,B,S,N,P] with N=4, P>=N, token dims [2,3], got [6,2,3,5,5]"),
      shape_rule<K>("sum_out_2I_differs", [](K& k) { k.in.sum_out = k.bag.add(DType::fp32, {4, 2, 3, 4}); }, "sum_out: expected [2I,B,S,P] with N=4, P=4, 2I=6, token dims [2,3], got [4,2,3,4]"),
      shape_rule<K>("bwd_sum_out_pitch_differs", [](K& k) { k.in.sum_out = k.bag.add(DType::fp32, {6, 2, 3, 8}); }, "sum_out: expected [2I,B,S,P] with N=4, P=4, 2I=6, token dims [2,3], got [6,2,3,8]"),
      layout_rule<K>("bwd_norm_out_not_contiguous", [](K& k) { k.in.norm_out = restrided(k.in.norm_out, {96, 48, 16, 4, 2}); }, "norm_out: expected a contiguous tensor (the caches' layout is the library's), got strides [96,48,16,4,2]"),
      value_rule<K>("bwd_hc_eps_nan", [](K& k) { k.options.hc_eps = kNaN; }, "hc_eps: expected a finite value >= 0, got nan"),
      layout_rule<K>("grad_x_overlaps_norm_out", [](K& k) { k.out.grad_x = reshaped(retyped(k.in.norm_out, DType::bf16), {2, 3, 4, 8}); }, "grad_x: output memory overlaps input norm_out"),
      layout_rule<K>("grad_bias_overlaps_bias", [](K& k) { k.out.grad_bias = k.in.bias; }, "grad_bias: output memory overlaps input bias"),
      layout_rule<K>("grad_phi_overlaps_sum_out", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {24 * 32});
        k.out.grad_phi = reshaped(pool, {24, 32});
        k.in.sum_out = reshaped(pool, {6, 2, 3, 4});
      }, "grad_phi: output memory overlaps input sum_out"),
  };
}

class FusedForwardRule : public ::testing::TestWithParam<LayerRule<FwdCall>> {};
TEST_P(FusedForwardRule, RejectedWithItsMessageAndNothingWritten) { expect_layer_rejected(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Rules, FusedForwardRule, ::testing::ValuesIn(forward_rules()), layer_rule_name<FwdCall>);

class FusedBackwardRule : public ::testing::TestWithParam<LayerRule<BwdCall>> {};
TEST_P(FusedBackwardRule, RejectedWithItsMessageAndNothingWritten) { expect_layer_rejected(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Rules, FusedBackwardRule, ::testing::ValuesIn(backward_rules()), layer_rule_name<BwdCall>);

// A regression test. At 31e625f, phi with F = 2N + N! rows (the permutation variant,
// R = N! = 24 at N = 4) passed MhcPre's validation and the fused pair only checked
// alpha's entries: the call was accepted, MhcPre wrote 24 logits a token into the
// driver's buffer and the Sinkhorn read it as [T, 4, 4] contiguous (16 a token), so
// every token after the first was normalised from the wrong logits and h_res
// [.., 24] got 16 of its 24 entries (fixed in a5c0da3). There is no N x N matrix
// to normalise: the call must be rejected (161002) naming phi (or h_res).
TEST(FusedValidation, PermutationRowsAreRejected) {
  auto k = FwdCall::make();
  k->in.phi = k->bag.add(DType::fp32, {32, 32});
  k->in.bias = k->bag.add(DType::fp32, {32});
  k->out.h_mix = k->bag.add(DType::fp32, {2, 3, 32});
  k->out.h_res = k->bag.add(DType::fp32, {2, 3, 24});
  {
    Rng rng(5);
    for (Tensor& t : k->bag.extra)
      if (t.shape == Shape{32, 32} || t.shape == Shape{32})
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(-0.2, 0.2));
  }
  const auto before = k->bag.snapshot();
  const mhc::Status s = k->run();
  EXPECT_EQ(s.code(), mhc::StatusCode::invalid_argument)
      << "BUG: pre_sinkhorn_forward accepted phi [2N+N!, K] = [32,32] with h_res [2,3,24]; got \"" << s.message() << "\"";
  EXPECT_TRUE(s.message().rfind("phi: ", 0) == 0 || s.message().rfind("h_res: ", 0) == 0) << s.message();
  EXPECT_TRUE(k->bag.snapshot() == before) << "BUG: the accepted call wrote the outputs";
  if (s.ok()) {  // show what it computed: token 1's H is not the Sinkhorn of any 4x4 block of its logits
    const TensorView h_res = k->out.h_res;
    const float* H = static_cast<const float*>(h_res.data);
    std::vector<float> z(6 * 24);
    const mhc::PreForwardOutputs pout{k->bag["u_h_in"].view(), k->bag["u_h_post"].view(),
                                      TensorView(z.data(), DType::fp32, {2, 3, 24}), {}, {}, {}};
    ASSERT_TRUE(mhc::pre_forward({k->in.x, k->in.phi, k->in.alpha, k->in.bias, std::nullopt}, pout, {}).ok());
    std::vector<float> H1(16);
    ASSERT_TRUE(mhc::sinkhorn_forward({TensorView(z.data() + 24, DType::fp32, {1, 4, 4}), 1e-6, 3},
                                      {TensorView(H1.data(), DType::fp32, {1, 4, 4}), {}, {}}, {}).ok());
    int same = 0;
    for (int e = 0; e < 16; ++e) same += H[24 + e] == H1[size_t(e)];
    ADD_FAILURE() << "token 1: h_res[1][0..15] equals the Sinkhorn of its first 16 logits in " << same
                  << " of 16 entries; h_res[1][16..23] (never written) = " << H[24 + 16] << " ...";
  }
}

// ------------------------------------------------------------------ the C face

TEST(FusedCApi, NullRequiredPointersAreNamed) {
  {
    auto k = FwdCall::make();
    const auto before = k->bag.snapshot();
    const char* names[] = {"x", "phi", "alpha", "bias", "h_in", "h_post", "h_res"};
    for (int which = 0; which < 7; ++which) {
      mhc_tensor t[7] = {to_c(k->in.x), to_c(k->in.phi), to_c(k->in.alpha), to_c(k->in.bias),
                         to_c(k->out.h_in), to_c(k->out.h_post), to_c(k->out.h_res)};
      const mhc_tensor* p[7];
      for (int i = 0; i < 7; ++i) p[i] = i == which ? nullptr : &t[i];
      EXPECT_EQ(mhc_pre_sinkhorn_forward(p[0], p[1], p[2], p[3], 3, p[4], p[5], p[6], nullptr, nullptr, nullptr,
                                         nullptr, nullptr, nullptr), MHC_ERR_NULLPTR);
      EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required, got NULL");
      EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
    }
    EXPECT_TRUE(k->bag.snapshot() == before);
  }
  auto k = BwdCall::make();
  const auto before = k->bag.snapshot();
  const char* names[] = {"grad_h_in", "grad_h_post", "grad_h_res", "x", "phi", "alpha", "bias", "h_pre",
                         "h_mix", "inv_rms", "sum_out", "norm_out", "grad_x", "grad_phi", "grad_alpha", "grad_bias"};
  for (int which = 0; which < 16; ++which) {
    mhc_tensor t[16] = {to_c(k->in.grad_h_in), to_c(k->in.grad_h_post), to_c(k->in.grad_h_res), to_c(k->in.x),
                        to_c(k->in.phi), to_c(k->in.alpha), to_c(k->in.bias), to_c(k->in.h_pre), to_c(k->in.h_mix),
                        to_c(k->in.inv_rms), to_c(k->in.sum_out), to_c(k->in.norm_out), to_c(k->out.grad_x),
                        to_c(k->out.grad_phi), to_c(k->out.grad_alpha), to_c(k->out.grad_bias)};
    const mhc_tensor* p[16];
    for (int i = 0; i < 16; ++i) p[i] = i == which ? nullptr : &t[i];
    EXPECT_EQ(mhc_pre_sinkhorn_backward(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11],
                                        p[12], p[13], p[14], p[15], nullptr), MHC_ERR_NULLPTR);
    EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required, got NULL");
  }
  EXPECT_TRUE(k->bag.snapshot() == before);
}

TEST(FusedCApi, ResultsEqualTheCppFace) {
  auto cpp = FwdCall::make(), c = FwdCall::make();
  ASSERT_TRUE(cpp->run().ok());
  ASSERT_EQ(c->run_c(), MHC_OK) << mhc_last_error();
  for (const std::string& name : kForwardOutputs) EXPECT_EQ(c->bag[name].raw(), cpp->bag[name].raw()) << name;
  auto bcpp = BwdCall::make(), bc = BwdCall::make();
  ASSERT_TRUE(bcpp->run().ok());
  ASSERT_EQ(bc->run_c(), MHC_OK) << mhc_last_error();
  for (const std::string& name : kBackwardOutputs) EXPECT_EQ(bc->bag[name].raw(), bcpp->bag[name].raw()) << name;
}

}  // namespace
}  // namespace mhc_test::layer
