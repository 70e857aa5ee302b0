// Decode calls (at most kDecodeTokens tokens, which split K among the workers
// instead of tokens) give every token the bits it gets inside a batch of 4096
// (which splits tokens; MHC_DECODE_BATCH_TOKENS sets another size from 1200, as the
// emulated Arm CPUs do), on every kernel family (or the one MHC_ISA names), for
// T = 1, 16 and 64 at any thread count (SPEC §5). At D = 1100 (K = 4400: three
// slices, the last partial) D is no multiple of a vector or of an AMX step; at
// D = 2048 (four whole slices) one token's cast runs inside its first row tile,
// and 2 and 3 threads give the decode path's first share two slices and one.
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "kernels/pre_forward.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

static_assert(mhc::kernels::kDecodeTokens == 64, "the cases below cover the decode path's bounds");

// The per-token bits of every forward output, tokens [t0, t0 + count) of a call of T.
std::vector<uint32_t> token_bits(const Tensor& t, int64_t T, int64_t t0, int64_t count) {
  const std::vector<uint32_t> all = t.raw();
  const size_t per = all.size() / size_t(T);
  return {all.begin() + long(per * t0), all.begin() + long(per * (t0 + count))};
}

struct DecodeCase {
  DType dtype;
  int64_t D;
  bool gamma;
  mhc::MatmulPrecision precision;
  const char* name;
};

class DecodeInvariance : public ::testing::TestWithParam<DecodeCase> {};

// The batch's tokens: 4096, or MHC_DECODE_BATCH_TOKENS (at least 1200: the tokens compared
// run from 1001 to 1128).
int64_t batch_tokens() {
  const char* env = std::getenv("MHC_DECODE_BATCH_TOKENS");
  if (env == nullptr || *env == '\0') return 4096;
  const long long n = std::atoll(env);
  return n >= 1200 && n <= 65536 ? n : 4096;
}

TEST_P(DecodeInvariance, DecodeCallsGiveTheBitsOfABatch) {
  Config batch_cfg;
  batch_cfg.N = 4, batch_cfg.D = GetParam().D, batch_cfg.B = 1, batch_cfg.S = batch_tokens();
  SCOPED_TRACE("a batch of " + std::to_string(batch_cfg.S) + " tokens");
  batch_cfg.dtype = GetParam().dtype;
  batch_cfg.gamma = GetParam().gamma;
  batch_cfg.seed = 77;
  const int64_t T = batch_cfg.T(), token_bytes = batch_cfg.K() * element_bytes(batch_cfg.dtype);
  Operands batch = make_operands(batch_cfg);
  for (mhc::Isa isa : families_under_test()) {
    SCOPED_TRACE(std::string("kernel family ") + mhc::isa_name(isa));
    batch.options.isa = isa;
    batch.options.num_threads = 2;
    batch.options.matmul_precision = GetParam().precision;
    ASSERT_TRUE(mhc::pre_forward(forward_inputs(batch), forward_outputs(batch), batch.options).ok());
    for (int64_t count : {int64_t(1), int64_t(16), int64_t(64)})
      for (int threads : {1, 2, 3}) {
        const int64_t t0 = 1000 + count;  // on no item's boundary of the batch
        SCOPED_TRACE("T=" + std::to_string(count) + " (tokens from " + std::to_string(t0) + "), " +
                     std::to_string(threads) + " thread(s)");
        Config small_cfg = batch_cfg;
        small_cfg.S = count;
        Operands small = make_operands(small_cfg);
        small.phi = batch.phi, small.alpha = batch.alpha, small.bias = batch.bias, small.gamma = batch.gamma;
        std::memcpy(small.x.data(), static_cast<char*>(batch.x.data()) + t0 * token_bytes, size_t(count * token_bytes));
        small.options.isa = isa;
        small.options.num_threads = threads;
        small.options.matmul_precision = GetParam().precision;
        ASSERT_TRUE(mhc::pre_forward(forward_inputs(small), forward_outputs(small), small.options).ok());
        for (auto [name, in_batch, alone] :
             {std::tuple{"h_in", &batch.h_in, &small.h_in}, {"h_post", &batch.h_post, &small.h_post},
              {"h_res", &batch.h_res, &small.h_res}, {"inv_rms", &batch.inv_rms, &small.inv_rms},
              {"h_mix", &batch.h_mix, &small.h_mix}, {"h_pre", &batch.h_pre, &small.h_pre}})
          EXPECT_EQ(token_bits(*alone, count, 0, count), token_bits(*in_batch, T, t0, count)) << name;
      }
  }
}

constexpr auto kFp32 = mhc::MatmulPrecision::fp32, kHf32 = mhc::MatmulPrecision::hf32;
INSTANTIATE_TEST_SUITE_P(N4, DecodeInvariance,
                         ::testing::Values(DecodeCase{DType::bf16, 1100, true, kFp32, "D1100_bf16"},
                                           DecodeCase{DType::fp16, 1100, true, kFp32, "D1100_fp16"},
                                           DecodeCase{DType::fp32, 1100, true, kFp32, "D1100_fp32"},
                                           DecodeCase{DType::bf16, 2048, true, kFp32, "D2048_bf16"},
                                           DecodeCase{DType::fp16, 2048, false, kFp32, "D2048_fp16_no_gamma"},
                                           DecodeCase{DType::fp32, 2048, true, kHf32, "D2048_fp32_hf32"}),
                         [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mhc_test
