// SPEC §4 for MhcPre: one row per rule, each rejected with its status code,
// error kind and exact message (naming the tensor, what was expected and what
// was given), and with no byte of any tensor written.
// Base: x [B,S,N,D]=[2,3,4,8] bf16, phi [24,32], alpha [3], bias [24], gamma [4,8].
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "validation_util.hpp"

namespace mhc_test {
namespace {

constexpr Op F = Op::forward;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<Rule> forward_rules() {
  const Config base = base_config(), tnd = tnd_config(), two = two_entry_config(), perm = perm_config();
  Config head = base;
  head.form = FForm::head;
  return {
      // ---- x: every generic view rule, on x
      null_rule("x_null_data", F, base, [](Call& k) { k.fin.x.data = nullptr; }, "x: data pointer is null"),
      shape_rule("x_rank_2", F, base, [](Call& k) { k.fin.x = reshaped(k.fin.x, {6, 32}); },
                 "x: expected [B,S,N,D] or [T,N,D], got [6,32]"),
      shape_rule("x_rank_9", F, base, [](Call& k) { k.fin.x.rank = 9; },
                 "x: expected a rank between 0 and 8, got []"),
      shape_rule("x_negative_rank", F, base, [](Call& k) { k.fin.x.rank = -1; },
                 "x: expected a rank between 0 and 8, got []"),
      dtype_rule("x_unknown_dtype_code", F, base, [](Call& k) { k.fin.x.dtype = static_cast<DType>(7); },
                 "x: expected dtype bf16, fp16 or fp32, got dtype code 7"),
      shape_rule("x_negative_dim", F, base, [](Call& k) { k.fin.x.shape[2] = -4; },
                 "x: expected non-negative dims, got [2,3,-4,8]"),
      shape_rule("x_zero_N", F, base, [](Call& k) { k.fin.x = reshaped(k.fin.x, {2, 3, 0, 8}); },
                 "x: expected N >= 1 and D >= 1 in [B,S,N,D] or [T,N,D], got [2,3,0,8]"),
      shape_rule("x_zero_D", F, tnd, [](Call& k) { k.fin.x = reshaped(k.fin.x, {6, 4, 0}); },
                 "x: expected N >= 1 and D >= 1 in [B,S,N,D] or [T,N,D], got [6,4,0]"),
      layout_rule("x_negative_stride", F, base, [](Call& k) { k.fin.x.strides[3] = -1; },
                  "x: expected non-negative strides, got [96,32,8,-1]"),
      layout_rule("x_odd_address_bf16", F, base, [](Call& k) { k.fin.x = moved_by_bytes(k.fin.x, 1); },
                  "x: data pointer is not aligned to its element size (2 bytes)"),
      layout_rule("x_element_count_overflow", F, base,
                  [](Call& k) { k.fin.x.shape[0] = int64_t(1) << 32; k.fin.x.shape[1] = int64_t(1) << 32; },
                  "x: element count of [4294967296,4294967296,4,8] overflows 64 bits"),
      layout_rule("x_offset_overflow", F, base,
                  [](Call& k) { k.fin.x.shape[0] = 3; k.fin.x.strides[0] = int64_t(1) << 62; },
                  "x: largest element offset overflows 64 bits (shape [3,3,4,8], strides "
                  "[4611686018427387904,32,8,1])"),
      layout_rule("x_byte_extent_overflow", F, base, [](Call& k) { k.fin.x.strides[0] = int64_t(1) << 62; },
                  "x: byte extent overflows the address space"),
      // ---- phi and alpha: F fixes the form, alpha must agree
      null_rule("phi_null_data", F, base, [](Call& k) { k.fin.phi.data = nullptr; }, "phi: data pointer is null"),
      dtype_rule("phi_bf16", F, base, [](Call& k) { k.fin.phi = retyped(k.fin.phi, DType::bf16); },
                 "phi: expected dtype fp32, got bf16"),
      layout_rule("phi_misaligned_fp32", F, base, [](Call& k) { k.fin.phi = moved_by_bytes(k.fin.phi, 2); },
                  "phi: data pointer is not aligned to its element size (4 bytes)"),
      shape_rule("phi_rows_not_an_F_form", F, base, [&](Call& k) { k.fin.phi = k.add(DType::fp32, {25, 32}); },
                 "phi: expected [F,K] with K=N*D=32 and F one of 2N+N*N=24, 2N+N!=32, 2N=8 (two-entry alpha), N=4 (the head), "
                 "got [25,32]"),
      shape_rule("phi_columns_not_K", F, base, [&](Call& k) { k.fin.phi = k.add(DType::fp32, {24, 33}); },
                 "phi: expected [F,K] with K=N*D=32 and F one of 2N+N*N=24, 2N+N!=32, 2N=8 (two-entry alpha), N=4 (the head), "
                 "got [24,33]"),
      shape_rule("phi_rank_1", F, base, [](Call& k) { k.fin.phi = reshaped(k.fin.phi, {24 * 32}); },
                 "phi: expected [F,K] with K=N*D=32 and F one of 2N+N*N=24, 2N+N!=32, 2N=8 (two-entry alpha), N=4 (the head), "
                 "got [768]"),
      shape_rule("phi_rows_for_N3", F, [] { Config c = base_config(); c.N = 3; return c; }(),
                 [&](Call& k) { k.fin.phi = k.add(DType::fp32, {16, 24}); },
                 "phi: expected [F,K] with K=N*D=24 and F one of 2N+N*N=15, 2N+N!=12, 2N=6 (two-entry alpha), N=3 (the head), "
                 "got [16,24]"),
      shape_rule("alpha_2_entries_with_residual_rows", F, base, [](Call& k) { k.fin.alpha = reshaped(k.fin.alpha, {2}); },
                 "alpha: expected [3] (phi has F=2N+R rows, R=16), got [2]"),
      shape_rule("alpha_2_entries_with_permutation_rows", F, perm,
                 [](Call& k) { k.fin.alpha = reshaped(k.fin.alpha, {2}); },
                 "alpha: expected [3] (phi has F=2N+R rows, R=24), got [2]"),
      shape_rule("alpha_3_entries_with_2N_rows", F, two, [&](Call& k) { k.fin.alpha = k.add(DType::fp32, {3}); },
                 "alpha: expected [2] (phi has F=2N rows: no residual branch), got [3]"),
      shape_rule("alpha_rank_2", F, base, [](Call& k) { k.fin.alpha = reshaped(k.fin.alpha, {1, 3}); },
                 "alpha: expected [3] (phi has F=2N+R rows, R=16), got [1,3]"),
      dtype_rule("alpha_fp16", F, base, [](Call& k) { k.fin.alpha = retyped(k.fin.alpha, DType::fp16); },
                 "alpha: expected dtype fp32, got fp16"),
      null_rule("alpha_null_data", F, base, [](Call& k) { k.fin.alpha.data = nullptr; }, "alpha: data pointer is null"),
      // ---- bias, gamma
      shape_rule("bias_F_plus_1", F, base, [&](Call& k) { k.fin.bias = k.add(DType::fp32, {25}); },
                 "bias: expected [F]=[24], got [25]"),
      dtype_rule("bias_bf16", F, base, [](Call& k) { k.fin.bias = retyped(k.fin.bias, DType::bf16); },
                 "bias: expected dtype fp32, got bf16"),
      layout_rule("bias_negative_stride", F, base, [](Call& k) { k.fin.bias.strides[0] = -1; },
                  "bias: expected non-negative strides, got [-1]"),
      shape_rule("gamma_N_by_D_plus_1", F, base, [&](Call& k) { k.fin.gamma = k.add(DType::fp32, {4, 9}); },
                 "gamma: expected [N,D]=[4,8], got [4,9]"),
      shape_rule("gamma_flat_K", F, base, [](Call& k) { k.fin.gamma = reshaped(*k.fin.gamma, {32}); },
                 "gamma: expected [N,D]=[4,8], got [32]"),
      dtype_rule("gamma_bf16", F, base, [](Call& k) { k.fin.gamma = retyped(*k.fin.gamma, DType::bf16); },
                 "gamma: expected dtype fp32, got bf16"),
      // ---- scalars
      value_rule("norm_eps_nan", F, base, [](Call& k) { k.options().norm_eps = kNaN; },
                 "norm_eps: expected a finite value >= 0, got nan"),
      value_rule("norm_eps_negative", F, base, [](Call& k) { k.options().norm_eps = -1e-6; },
                 "norm_eps: expected a finite value >= 0, got -0.000001"),
      value_rule("norm_eps_infinite", F, base, [](Call& k) { k.options().norm_eps = INFINITY; },
                 "norm_eps: expected a finite value >= 0, got inf"),
      value_rule("hc_eps_nan", F, base, [](Call& k) { k.options().hc_eps = kNaN; },
                 "hc_eps: expected a finite value >= 0, got nan"),
      value_rule("hc_eps_negative", F, base, [](Call& k) { k.options().hc_eps = -0.5; },
                 "hc_eps: expected a finite value >= 0, got -0.500000"),
      value_rule("matmul_precision_2", F, base, [](Call& k) { k.options().matmul_precision = mhc::MatmulPrecision(2); },
                 "matmul_precision: expected MHC_MATMUL_FP32 (0) or MHC_MATMUL_HF32 (1), got 2"),
      value_rule("num_threads_negative", F, base, [](Call& k) { k.options().num_threads = -1; },
                 "num_threads: expected >= 0, got -1"),
      // ---- h_in: x's dtype, [.., D] in x's layout
      dtype_rule("h_in_fp16_for_bf16_x", F, base, [&](Call& k) { k.fout.h_in = k.add(DType::fp16, {2, 3, 8}); },
                 "h_in: expected dtype bf16 (x's dtype), got fp16"),
      dtype_rule("h_in_fp32_for_bf16_x", F, base, [&](Call& k) { k.fout.h_in = k.add(DType::fp32, {2, 3, 8}); },
                 "h_in: expected dtype bf16 (x's dtype), got fp32"),
      shape_rule("h_in_D_plus_1", F, base, [&](Call& k) { k.fout.h_in = k.add(DType::bf16, {2, 3, 9}); },
                 "h_in: expected [B,S,D]=[2,3,8], got [2,3,9]"),
      shape_rule("h_in_other_layout_than_x", F, base, [](Call& k) { k.fout.h_in = reshaped(k.fout.h_in, {6, 8}); },
                 "h_in: expected [B,S,D]=[2,3,8], got [6,8]"),
      shape_rule("h_in_D_plus_1_tnd", F, tnd, [&](Call& k) { k.fout.h_in = k.add(DType::bf16, {6, 9}); },
                 "h_in: expected [T,D]=[6,8], got [6,9]"),
      null_rule("h_in_null_data", F, base, [](Call& k) { k.fout.h_in.data = nullptr; }, "h_in: data pointer is null"),
      layout_rule("h_in_odd_address", F, base, [](Call& k) { k.fout.h_in = moved_by_bytes(k.fout.h_in, 1); },
                  "h_in: data pointer is not aligned to its element size (2 bytes)"),
      // ---- h_post, h_res
      dtype_rule("h_post_bf16", F, base, [](Call& k) { k.fout.h_post = retyped(*k.fout.h_post, DType::bf16); },
                 "h_post: expected dtype fp32, got bf16"),
      shape_rule("h_post_N_plus_1", F, base, [&](Call& k) { k.fout.h_post = k.add(DType::fp32, {2, 3, 5}); },
                 "h_post: expected [B,S,N]=[2,3,4], got [2,3,5]"),
      shape_rule("h_res_wrong_N", F, base, [&](Call& k) { k.fout.h_res = k.add(DType::fp32, {2, 3, 5, 4}); },
                 "h_res: expected [B,S,N,N]=[2,3,4,4] or [B,S,R]=[2,3,16], got [2,3,5,4]"),
      shape_rule("h_res_wrong_N_tnd", F, tnd, [&](Call& k) { k.fout.h_res = k.add(DType::fp32, {6, 5, 4}); },
                 "h_res: expected [T,N,N]=[6,4,4] or [T,R]=[6,16], got [6,5,4]"),
      shape_rule("h_res_N_by_N_for_permutation_R", F, perm,
                 [&](Call& k) { k.fout.h_res = k.add(DType::fp32, {2, 3, 4, 4}); },
                 "h_res: expected [B,S,R]=[2,3,24], got [2,3,4,4]"),
      dtype_rule("h_res_fp16", F, base, [](Call& k) { k.fout.h_res = retyped(*k.fout.h_res, DType::fp16); },
                 "h_res: expected dtype fp32, got fp16"),
      null_rule("h_post_missing", F, base, [](Call& k) { k.fout.h_post.reset(); },
                "h_post: required (alpha has 2 or 3 entries), got none"),
      shape_rule("alpha_3_entries_for_head_phi", F, head, [&](Call& k) { k.fin.alpha = k.add(DType::fp32, {3}); },
                 "alpha: expected [1] (phi has F=N rows: the head, the pre branch only), got [3]"),
      shape_rule("alpha_1_entry_for_square_phi", F, base, [&](Call& k) { k.fin.alpha = k.add(DType::fp32, {1}); },
                 "alpha: expected [3] (phi has F=2N+R rows, R=16), got [1]"),
      null_rule("h_res_missing_with_3_entry_alpha", F, base, [](Call& k) { k.fout.h_res.reset(); },
                "h_res: required (alpha has 3 entries), got none"),
      // ---- caches: all three or none
      null_rule("inv_rms_missing", F, base, [](Call& k) { k.fout.inv_rms.reset(); },
                "inv_rms: the caches inv_rms, h_mix, h_pre come all three or none; this one is missing"),
      null_rule("h_mix_missing", F, base, [](Call& k) { k.fout.h_mix.reset(); },
                "h_mix: the caches inv_rms, h_mix, h_pre come all three or none; this one is missing"),
      null_rule("h_pre_missing", F, base, [](Call& k) { k.fout.h_pre.reset(); },
                "h_pre: the caches inv_rms, h_mix, h_pre come all three or none; this one is missing"),
      null_rule("only_inv_rms_given", F, base, [](Call& k) { k.fout.h_mix.reset(); k.fout.h_pre.reset(); },
                "h_mix: the caches inv_rms, h_mix, h_pre come all three or none; this one is missing"),
      shape_rule("inv_rms_trailing_1", F, base, [](Call& k) { k.fout.inv_rms = reshaped(*k.fout.inv_rms, {2, 3, 1}); },
                 "inv_rms: expected [B,S]=[2,3], got [2,3,1]"),
      shape_rule("inv_rms_tnd_wrong_T", F, tnd, [](Call& k) { k.fout.inv_rms = reshaped(*k.fout.inv_rms, {5}); },
                 "inv_rms: expected [T]=[6], got [5]"),
      shape_rule("h_mix_F_minus_1", F, base, [](Call& k) { k.fout.h_mix = reshaped(*k.fout.h_mix, {2, 3, 23}); },
                 "h_mix: expected [B,S,F]=[2,3,24], got [2,3,23]"),
      dtype_rule("h_mix_bf16", F, base, [](Call& k) { k.fout.h_mix = retyped(*k.fout.h_mix, DType::bf16); },
                 "h_mix: expected dtype fp32, got bf16"),
      shape_rule("h_pre_N_minus_1", F, tnd, [](Call& k) { k.fout.h_pre = reshaped(*k.fout.h_pre, {6, 3}); },
                 "h_pre: expected [T,N]=[6,4], got [6,3]"),
      // ---- overlaps: outputs with each other, with inputs, with themselves
      layout_rule("h_pre_is_h_post", F, base, [](Call& k) { k.fout.h_pre = k.fout.h_post; },
                  "h_pre: output memory overlaps output h_post"),
      layout_rule("h_mix_overlaps_h_res_by_one_element", F, base,
                  [](Call& k) {
                    const TensorView pool = k.pool(DType::fp32, 96 + 144 - 1);
                    k.fout.h_res = Call::sub(pool, 0, {2, 3, 4, 4});
                    k.fout.h_mix = Call::sub(pool, 95, {2, 3, 24});
                  },
                  "h_mix: output memory overlaps output h_res"),
      layout_rule("h_in_inside_x", F, base, [](Call& k) { k.fout.h_in = retyped(reshaped(k.fin.x, {2, 3, 8}), DType::bf16); },
                  "h_in: output memory overlaps input x"),
      layout_rule("h_post_inside_phi", F, base,
                  [](Call& k) { k.fout.h_post = moved_by_bytes(reshaped(k.fin.phi, {2, 3, 4}), 64); },
                  "h_post: output memory overlaps input phi"),
      layout_rule("inv_rms_is_gamma", F, base, [](Call& k) { k.fout.inv_rms = reshaped(*k.fin.gamma, {2, 3}); },
                  "inv_rms: output memory overlaps input gamma"),
      layout_rule("h_res_overlaps_bias", F, base,
                  [](Call& k) {
                    const TensorView pool = k.pool(DType::fp32, 120);
                    k.fin.bias = Call::sub(pool, 0, {24});
                    k.fout.h_res = Call::sub(pool, 20, {2, 3, 4, 4});
                  },
                  "h_res: output memory overlaps input bias"),
      layout_rule("h_post_zero_stride", F, base, [](Call& k) { k.fout.h_post = restrided(*k.fout.h_post, {12, 4, 0}); },
                  "h_post: output strides [12,4,0] make elements of shape [2,3,4] overlap"),
      layout_rule("h_mix_rows_overlap", F, base, [](Call& k) { k.fout.h_mix = restrided(*k.fout.h_mix, {24, 24, 1}); },
                  "h_mix: output strides [24,24,1] make elements of shape [2,3,24] overlap"),
      layout_rule("h_in_interleaved_overlap", F, tnd, [](Call& k) { k.fout.h_in = restrided(k.fout.h_in, {4, 1}); },
                  "h_in: output strides [4,1] make elements of shape [6,8] overlap"),
  };
}

class ForwardValidation : public ::testing::TestWithParam<Rule> {};

TEST_P(ForwardValidation, RejectedWithCodeKindMessageAndNothingWritten) { expect_rejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rules, ForwardValidation, ::testing::ValuesIn(forward_rules()), rule_name);

// The base calls are valid in every variant used above (else the rows prove nothing).
TEST(ForwardValidation, BaseCallsSucceed) {
  for (const Config& c : {base_config(), tnd_config(), two_entry_config(), perm_config(), no_gamma_config()}) {
    std::unique_ptr<Call> k = make_call(c, F);
    const mhc::Status st = k->run(F);
    EXPECT_TRUE(st.ok()) << c.name() << ": " << st.message();
  }
}

// Zero tokens is valid, writes nothing and needs no data.
TEST(ForwardValidation, ZeroTokensIsValid) {
  Config c = base_config();
  c.B = 0;
  std::unique_ptr<Call> k = make_call(c, F);
  k->fin.x.data = nullptr;
  k->fout.h_in.data = nullptr;
  const auto before = k->snapshot();
  const mhc::Status st = k->run(F);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(k->snapshot() == before);
}

}  // namespace
}  // namespace mhc_test
