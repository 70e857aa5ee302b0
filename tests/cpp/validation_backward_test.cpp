// SPEC §4 for MhcPreBackward: one row per rule (code, kind, exact message, no
// byte written), and the one allowed alias, grad_x == grad_x_post.
// Base: x [B,S,N,D]=[2,3,4,8] bf16, F=24, K=32, gamma and grad_x_post given.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "validation_util.hpp"

namespace mhc_test {
namespace {

constexpr Op B = Op::backward;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<Rule> backward_rules() {
  const Config base = base_config(), tnd = tnd_config(), two = two_entry_config(), perm = perm_config();
  Config head = base;
  head.form = FForm::head;
  const Config no_gamma = no_gamma_config();
  return {
      // ---- x (the generic view rules are in the forward table; these are the backward's)
      null_rule("x_null_data", B, base, [](Call& k) { k.bin.x.data = nullptr; }, "x: data pointer is null"),
      shape_rule("x_rank_5", B, base, [](Call& k) { k.bin.x = reshaped(k.bin.x, {1, 2, 3, 4, 8}); },
                 "x: expected [B,S,N,D] or [T,N,D], got [1,2,3,4,8]"),
      dtype_rule("grad_h_in_bf16_for_fp32_x", B, base, [](Call& k) { k.bin.x = retyped(k.bin.x, DType::fp32); },
                 "grad_h_in: expected dtype fp32 (x's dtype), got bf16"),
      shape_rule("phi_rows_not_an_F_form", B, base, [&](Call& k) { k.bin.phi = k.add(DType::fp32, {23, 32}); },
                 "phi: expected [F,K] with K=N*D=32 and F one of 2N+N*N=24, 2N+N!=32, 2N=8 (two-entry alpha), N=4 (the head), "
                 "got [23,32]"),
      shape_rule("alpha_2_entries_with_residual_rows", B, base,
                 [](Call& k) { k.bin.alpha = reshaped(k.bin.alpha, {2}); },
                 "alpha: expected [3] (phi has F=2N+R rows, R=16), got [2]"),
      shape_rule("alpha_3_entries_with_2N_rows", B, two, [&](Call& k) { k.bin.alpha = k.add(DType::fp32, {3}); },
                 "alpha: expected [2] (phi has F=2N rows: no residual branch), got [3]"),
      // ---- grad_h_in: x's dtype, [.., D]
      dtype_rule("grad_h_in_fp16", B, base, [&](Call& k) { k.bin.grad_h_in = k.add(DType::fp16, {2, 3, 8}); },
                 "grad_h_in: expected dtype bf16 (x's dtype), got fp16"),
      shape_rule("grad_h_in_D_plus_1", B, base, [&](Call& k) { k.bin.grad_h_in = k.add(DType::bf16, {2, 3, 9}); },
                 "grad_h_in: expected [B,S,D]=[2,3,8], got [2,3,9]"),
      shape_rule("grad_h_in_tnd_wrong_T", B, tnd, [](Call& k) { k.bin.grad_h_in = reshaped(k.bin.grad_h_in, {5, 8}); },
                 "grad_h_in: expected [T,D]=[6,8], got [5,8]"),
      null_rule("grad_h_in_null_data", B, base, [](Call& k) { k.bin.grad_h_in.data = nullptr; },
                "grad_h_in: data pointer is null"),
      layout_rule("grad_h_in_negative_stride", B, base, [](Call& k) { k.bin.grad_h_in.strides[1] = -8; },
                  "grad_h_in: expected non-negative strides, got [24,-8,1]"),
      // ---- grad_h_post, grad_h_res
      dtype_rule("grad_h_post_bf16", B, base,
                 [](Call& k) { k.bin.grad_h_post = retyped(*k.bin.grad_h_post, DType::bf16); },
                 "grad_h_post: expected dtype fp32, got bf16"),
      shape_rule("grad_h_post_N_plus_1", B, base, [&](Call& k) { k.bin.grad_h_post = k.add(DType::fp32, {2, 3, 5}); },
                 "grad_h_post: expected [B,S,N]=[2,3,4], got [2,3,5]"),
      shape_rule("grad_h_res_wrong_N", B, base, [&](Call& k) { k.bin.grad_h_res = k.add(DType::fp32, {2, 3, 5, 4}); },
                 "grad_h_res: expected [B,S,N,N]=[2,3,4,4] or [B,S,R]=[2,3,16], got [2,3,5,4]"),
      shape_rule("grad_h_res_wrong_N_tnd", B, tnd, [&](Call& k) { k.bin.grad_h_res = k.add(DType::fp32, {6, 5, 4}); },
                 "grad_h_res: expected [T,N,N]=[6,4,4] or [T,R]=[6,16], got [6,5,4]"),
      shape_rule("grad_h_res_N_by_N_for_permutation_R", B, perm,
                 [&](Call& k) { k.bin.grad_h_res = k.add(DType::fp32, {2, 3, 4, 4}); },
                 "grad_h_res: expected [B,S,R]=[2,3,24], got [2,3,4,4]"),
      dtype_rule("grad_h_res_fp16", B, base,
                 [](Call& k) { k.bin.grad_h_res = retyped(*k.bin.grad_h_res, DType::fp16); },
                 "grad_h_res: expected dtype fp32, got fp16"),
      null_rule("grad_h_post_missing", B, base, [](Call& k) { k.bin.grad_h_post.reset(); },
                "grad_h_post: required (alpha has 2 or 3 entries), got none"),
      null_rule("h_post_missing", B, base, [](Call& k) { k.bin.h_post.reset(); },
                "h_post: required (alpha has 2 or 3 entries), got none"),
      shape_rule("grad_alpha_3_entries_for_head", B, head, [&](Call& k) { k.bout.grad_alpha = k.add(DType::fp32, {3}); },
                 "grad_alpha: expected [1] (alpha's shape), got [3]"),
      null_rule("grad_h_res_missing_with_3_entry_alpha", B, base, [](Call& k) { k.bin.grad_h_res.reset(); },
                "grad_h_res: required (alpha has 3 entries), got none"),
      // ---- the forward's caches and h_post
      shape_rule("inv_rms_trailing_1", B, base, [](Call& k) { k.bin.inv_rms = reshaped(k.bin.inv_rms, {2, 3, 1}); },
                 "inv_rms: expected [B,S]=[2,3], got [2,3,1]"),
      dtype_rule("inv_rms_bf16", B, base, [](Call& k) { k.bin.inv_rms = retyped(k.bin.inv_rms, DType::bf16); },
                 "inv_rms: expected dtype fp32, got bf16"),
      null_rule("inv_rms_null_data", B, base, [](Call& k) { k.bin.inv_rms.data = nullptr; },
                "inv_rms: data pointer is null"),
      shape_rule("h_mix_F_minus_1", B, base, [](Call& k) { k.bin.h_mix = reshaped(k.bin.h_mix, {2, 3, 23}); },
                 "h_mix: expected [B,S,F]=[2,3,24], got [2,3,23]"),
      shape_rule("h_mix_of_permutation_F", B, perm, [](Call& k) { k.bin.h_mix = reshaped(k.bin.h_mix, {2, 3, 24}); },
                 "h_mix: expected [B,S,F]=[2,3,32], got [2,3,24]"),
      shape_rule("h_pre_N_minus_1", B, base, [](Call& k) { k.bin.h_pre = reshaped(k.bin.h_pre, {2, 3, 3}); },
                 "h_pre: expected [B,S,N]=[2,3,4], got [2,3,3]"),
      dtype_rule("h_post_fp16", B, base, [](Call& k) { k.bin.h_post = retyped(*k.bin.h_post, DType::fp16); },
                 "h_post: expected dtype fp32, got fp16"),
      shape_rule("h_post_tnd_in_bsnd_call", B, base, [](Call& k) { k.bin.h_post = reshaped(*k.bin.h_post, {6, 4}); },
                 "h_post: expected [B,S,N]=[2,3,4], got [6,4]"),
      // ---- gamma, grad_x_post
      shape_rule("gamma_N_by_D_plus_1", B, base, [&](Call& k) { k.bin.gamma = k.add(DType::fp32, {4, 9}); },
                 "gamma: expected [N,D]=[4,8], got [4,9]"),
      dtype_rule("gamma_fp16", B, base, [](Call& k) { k.bin.gamma = retyped(*k.bin.gamma, DType::fp16); },
                 "gamma: expected dtype fp32, got fp16"),
      dtype_rule("grad_x_post_fp16", B, base, [](Call& k) { k.bin.grad_x_post = retyped(*k.bin.grad_x_post, DType::fp16); },
                 "grad_x_post: expected dtype bf16 (x's dtype) or fp32, got fp16"),
      // fp32 is accepted with any x (MhcPostBackward's fp32 grad_x): its shape still counts.
      shape_rule("grad_x_post_fp32_D_plus_1", B, base, [&](Call& k) { k.bin.grad_x_post = k.add(DType::fp32, {2, 3, 4, 9}); },
                 "grad_x_post: expected [B,S,N,D]=[2,3,4,8], got [2,3,4,9]"),
      shape_rule("grad_x_post_D_plus_1", B, base, [&](Call& k) { k.bin.grad_x_post = k.add(DType::bf16, {2, 3, 4, 9}); },
                 "grad_x_post: expected [B,S,N,D]=[2,3,4,8], got [2,3,4,9]"),
      layout_rule("grad_x_post_odd_address", B, base,
                  [](Call& k) { k.bin.grad_x_post = moved_by_bytes(*k.bin.grad_x_post, 1); },
                  "grad_x_post: data pointer is not aligned to its element size (2 bytes)"),
      // ---- scalars
      value_rule("hc_eps_nan", B, base, [](Call& k) { k.options().hc_eps = kNaN; },
                 "hc_eps: expected a finite value >= 0, got nan"),
      value_rule("hc_eps_negative", B, base, [](Call& k) { k.options().hc_eps = -1.0; },
                 "hc_eps: expected a finite value >= 0, got -1.000000"),
      value_rule("matmul_precision_negative", B, base,
                 [](Call& k) { k.options().matmul_precision = mhc::MatmulPrecision(-1); },
                 "matmul_precision: expected MHC_MATMUL_FP32 (0) or MHC_MATMUL_HF32 (1), got -1"),
      value_rule("num_threads_negative", B, base, [](Call& k) { k.options().num_threads = -3; },
                 "num_threads: expected >= 0, got -3"),
      // ---- outputs
      dtype_rule("grad_x_fp32_for_bf16_x", B, base, [&](Call& k) { k.bout.grad_x = k.add(DType::fp32, {2, 3, 4, 8}); },
                 "grad_x: expected dtype bf16 (x's dtype), got fp32"),
      shape_rule("grad_x_D_plus_1", B, base, [&](Call& k) { k.bout.grad_x = k.add(DType::bf16, {2, 3, 4, 9}); },
                 "grad_x: expected [B,S,N,D]=[2,3,4,8], got [2,3,4,9]"),
      shape_rule("grad_x_tnd_in_bsnd_call", B, base, [](Call& k) { k.bout.grad_x = reshaped(k.bout.grad_x, {6, 4, 8}); },
                 "grad_x: expected [B,S,N,D]=[2,3,4,8], got [6,4,8]"),
      null_rule("grad_x_null_data", B, base, [](Call& k) { k.bout.grad_x.data = nullptr; },
                "grad_x: data pointer is null"),
      shape_rule("grad_phi_K_minus_1", B, base, [](Call& k) { k.bout.grad_phi = reshaped(k.bout.grad_phi, {24, 31}); },
                 "grad_phi: expected [F,K]=[24,32], got [24,31]"),
      dtype_rule("grad_phi_bf16", B, base, [](Call& k) { k.bout.grad_phi = retyped(k.bout.grad_phi, DType::bf16); },
                 "grad_phi: expected dtype fp32, got bf16"),
      layout_rule("grad_phi_misaligned", B, base, [](Call& k) { k.bout.grad_phi = moved_by_bytes(k.bout.grad_phi, 2); },
                  "grad_phi: data pointer is not aligned to its element size (4 bytes)"),
      layout_rule("grad_phi_element_count_overflow", B, base,
                  [](Call& k) { k.bout.grad_phi.shape[0] = k.bout.grad_phi.shape[1] = int64_t(1) << 40; },
                  "grad_phi: element count of [1099511627776,1099511627776] overflows 64 bits"),
      shape_rule("grad_alpha_2_for_3", B, base, [](Call& k) { k.bout.grad_alpha = reshaped(k.bout.grad_alpha, {2}); },
                 "grad_alpha: expected [3] (alpha's shape), got [2]"),
      shape_rule("grad_alpha_3_for_2", B, two, [&](Call& k) { k.bout.grad_alpha = k.add(DType::fp32, {3}); },
                 "grad_alpha: expected [2] (alpha's shape), got [3]"),
      shape_rule("grad_bias_F_minus_1", B, base, [](Call& k) { k.bout.grad_bias = reshaped(k.bout.grad_bias, {23}); },
                 "grad_bias: expected [F]=[24], got [23]"),
      shape_rule("grad_bias_of_square_F_for_permutation", B, perm,
                 [](Call& k) { k.bout.grad_bias = reshaped(k.bout.grad_bias, {24}); },
                 "grad_bias: expected [F]=[32], got [24]"),
      null_rule("grad_gamma_missing_with_gamma", B, base, [](Call& k) { k.bout.grad_gamma.reset(); },
                "grad_gamma: required when gamma is given, got none"),
      shape_rule("grad_gamma_given_without_gamma", B, no_gamma,
                 [&](Call& k) { k.bout.grad_gamma = k.add(DType::fp32, {4, 8}); },
                 "grad_gamma: expected no tensor (gamma is not given), got [4,8]"),
      shape_rule("grad_gamma_N_by_D_plus_1", B, base, [&](Call& k) { k.bout.grad_gamma = k.add(DType::fp32, {4, 9}); },
                 "grad_gamma: expected [N,D]=[4,8], got [4,9]"),
      // ---- overlaps
      layout_rule("grad_bias_inside_grad_phi", B, base,
                  [](Call& k) { k.bout.grad_bias = Call::sub(k.bout.grad_phi, 100, {24}); },
                  "grad_bias: output memory overlaps output grad_phi"),
      layout_rule("grad_gamma_overlaps_grad_alpha", B, base,
                  [](Call& k) {
                    const TensorView pool = k.pool(DType::fp32, 34);
                    k.bout.grad_alpha = Call::sub(pool, 0, {3});
                    k.bout.grad_gamma = Call::sub(pool, 2, {4, 8});
                  },
                  "grad_gamma: output memory overlaps output grad_alpha"),
      layout_rule("grad_phi_is_phi", B, base, [](Call& k) { k.bout.grad_phi = k.bin.phi; },
                  "grad_phi: output memory overlaps input phi"),
      layout_rule("grad_x_is_x", B, base, [](Call& k) { k.bout.grad_x = k.bin.x; },
                  "grad_x: output memory overlaps input x"),
      layout_rule("grad_x_overlaps_grad_h_in", B, base,
                  [](Call& k) {
                    const TensorView pool = k.pool(DType::bf16, 192);
                    k.bin.grad_h_in = Call::sub(pool, 0, {2, 3, 8});
                    k.bout.grad_x = Call::sub(pool, 0, {2, 3, 4, 8});
                  },
                  "grad_x: output memory overlaps input grad_h_in"),
      layout_rule("grad_alpha_inside_h_mix", B, base, [](Call& k) { k.bout.grad_alpha = Call::sub(k.bin.h_mix, 5, {3}); },
                  "grad_alpha: output memory overlaps input h_mix"),
      layout_rule("grad_gamma_is_gamma", B, base, [](Call& k) { k.bout.grad_gamma = k.bin.gamma; },
                  "grad_gamma: output memory overlaps input gamma"),
      layout_rule("grad_x_one_element_after_grad_x_post", B, base,
                  [](Call& k) {
                    const TensorView pool = k.pool(DType::bf16, 193);
                    k.bin.grad_x_post = Call::sub(pool, 0, {2, 3, 4, 8});
                    k.bout.grad_x = Call::sub(pool, 1, {2, 3, 4, 8});
                  },
                  "grad_x: output memory overlaps input grad_x_post (only an exact alias of grad_x_post is allowed)"),
      layout_rule("grad_x_on_grad_x_post_with_other_strides", B, base,
                  [](Call& k) { k.bout.grad_x = restrided(*k.bin.grad_x_post, {96, 32, 1, 4}); },
                  "grad_x: output memory overlaps input grad_x_post (only an exact alias of grad_x_post is allowed)"),
      layout_rule("grad_x_zero_stride", B, base, [](Call& k) { k.bout.grad_x = restrided(k.bout.grad_x, {96, 32, 0, 1}); },
                  "grad_x: output strides [96,32,0,1] make elements of shape [2,3,4,8] overlap"),
      layout_rule("grad_phi_rows_overlap", B, base, [](Call& k) { k.bout.grad_phi = restrided(k.bout.grad_phi, {16, 1}); },
                  "grad_phi: output strides [16,1] make elements of shape [24,32] overlap"),
  };
}

class BackwardValidation : public ::testing::TestWithParam<Rule> {};

TEST_P(BackwardValidation, RejectedWithCodeKindMessageAndNothingWritten) { expect_rejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rules, BackwardValidation, ::testing::ValuesIn(backward_rules()), rule_name);

TEST(BackwardValidation, BaseCallsSucceed) {
  for (const Config& c : {base_config(), tnd_config(), two_entry_config(), perm_config(), no_gamma_config()}) {
    std::unique_ptr<Call> k = make_call(c, B);
    const mhc::Status st = k->run(B);
    EXPECT_TRUE(st.ok()) << c.name() << ": " << st.message();
  }
}

// The allowed alias: grad_x and grad_x_post the same view. grad_x is accumulated
// in place and equals the non-aliased result bitwise.
class InPlaceGradX : public ::testing::TestWithParam<DType> {};

TEST_P(InPlaceGradX, AliasOfGradXPostEqualsSeparateOutput) {
  for (bool bsnd : {true, false}) {
    Config c = bsnd ? base_config() : tnd_config();
    c.dtype = GetParam();
    c.D = 37;  // K = 148
    Operands o = make_operands(c);
    ASSERT_TRUE(run_forward_with_caches(o).ok());
    Operands separate = o;
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(separate), backward_outputs(separate), o.options).ok());
    mhc::PreBackwardOutputs out = backward_outputs(o);
    out.grad_x = o.grad_x_post.view();
    const mhc::Status st = mhc::pre_backward(backward_inputs(o), out, o.options);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(o.grad_x_post.raw(), separate.grad_x.raw()) << (bsnd ? "[B,S,N,D]" : "[T,N,D]");
    EXPECT_EQ(o.grad_phi.raw(), separate.grad_phi.raw());
    EXPECT_EQ(o.grad_gamma.raw(), separate.grad_gamma.raw());
    // and it did accumulate: grad_x_post was not zero, the result differs from a run without it
    Operands without = separate;
    without.grad_x_post = Tensor{};
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(without), backward_outputs(without), o.options).ok());
    EXPECT_NE(without.grad_x.raw(), separate.grad_x.raw());
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, InPlaceGradX, ::testing::Values(DType::bf16, DType::fp16, DType::fp32),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

}  // namespace
}  // namespace mhc_test
