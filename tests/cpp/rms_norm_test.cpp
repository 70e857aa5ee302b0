// MhcRmsNorm (SPEC §16), the engines' RMSNorm of h_in, on every kernel family this
// build and CPU run: within half an ulp of x's dtype (plus fp32's own error) of the
// float64 formula; the same bits for a token alone and inside any batch, at any
// thread count, in any layout; validation naming the tensor, no output touched.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace mhc_test::rms_norm {
namespace {

struct Inputs {
  Tensor x, weight;
};

Inputs make_inputs(int64_t T, int64_t D, DType dtype, DType weight_dtype, uint64_t seed) {
  Rng rng(seed);
  Inputs in{make_tensor(dtype, {T, D}), make_tensor(weight_dtype, {D})};
  for (int64_t i = 0; i < in.x.numel(); ++i) in.x.set(i, rng.uniform(-3.0, 3.0) * (1 + (i % 7)));
  for (int64_t i = 0; i < D; ++i) in.weight.set(i, rng.uniform(0.5, 1.5));
  return in;
}

Tensor run(Inputs& in, mhc::Isa isa, int threads, double eps = 1e-6) {
  Tensor y = make_tensor(in.x.dtype(), in.x.shape, 0x5a);
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  const mhc::Status s = mhc::rms_norm_forward({in.x.view(), in.weight.view(), eps}, {y.view()}, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return y;
}

double ulp(double v, DType dtype) {
  const int bits = dtype == DType::bf16 ? 8 : dtype == DType::fp16 ? 11 : 24;
  const double a = std::max(std::fabs(v), dtype == DType::fp16 ? 6.1e-5 : 1.2e-38);
  return std::ldexp(1.0, std::ilogb(a) - (bits - 1));
}

TEST(RmsNorm, WithinHalfAnUlpOfFloat64OnEveryFamily) {
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
      for (DType weight_dtype : {dtype, DType::fp32})
        for (int64_t D : {1, 7, 16, 141, 4096}) {
          Inputs in = make_inputs(5, D, dtype, weight_dtype, uint64_t(D) * 31 + int(dtype));
          const Tensor y = run(in, isa, 2);
          for (int64_t t = 0; t < 5; ++t) {
            double ms = 0;
            for (int64_t d = 0; d < D; ++d) ms += in.x.get(t * D + d) * in.x.get(t * D + d);
            const double inv = 1.0 / std::sqrt(ms / double(D) + 1e-6);
            for (int64_t d = 0; d < D; ++d) {
              const double want = in.x.get(t * D + d) * inv * in.weight.get(d);
              // fp32's steps: about D·2^-24 relative in ms, a few 2^-24 in the products.
              const double bound = (dtype == DType::fp32 ? 0.0 : 0.5 * ulp(want, dtype)) +
                                   std::fabs(want) * (double(D) + 8) * 0x1p-24;
              ASSERT_LE(std::fabs(y.get(t * D + d) - want), bound)
                  << mhc::isa_name(isa) << " " << dtype_name(dtype) << " D=" << D << " token " << t << " d " << d;
            }
          }
        }
}

TEST(RmsNorm, ATokensBitsDoNotDependOnItsBatchThreadsFamilyOrLayout) {
  const int64_t D = 4100;
  Inputs batch = make_inputs(67, D, DType::bf16, DType::fp32, 7);
  const Tensor reference = run(batch, mhc::Isa::reference, 1);
  Rng rng(3);
  for (mhc::Isa isa : available_families())
    for (int threads : {1, 2, 3}) {
      EXPECT_EQ(run(batch, isa, threads).raw(), reference.raw()) << mhc::isa_name(isa) << " threads " << threads;
      Inputs strided{relaid(batch.x, Layout::permuted, rng), relaid(batch.weight, Layout::every_other, rng)};
      EXPECT_EQ(run(strided, isa, threads).raw(), reference.raw()) << mhc::isa_name(isa) << " strided";
    }
  for (int64_t t : {0, 33, 66}) {  // each token alone
    Inputs one = make_inputs(1, D, DType::bf16, DType::fp32, 0);
    for (int64_t d = 0; d < D; ++d) one.x.set(d, batch.x.get(t * D + d));
    one.weight = batch.weight;
    const std::vector<uint32_t> all = reference.raw(), alone = run(one, mhc::Isa::automatic, 2).raw();
    EXPECT_EQ(alone, std::vector<uint32_t>(all.begin() + t * D, all.begin() + (t + 1) * D)) << "token " << t;
  }
}

TEST(RmsNorm, AnEmptyBatchAndThreeDimensionalTokens) {
  Inputs empty = make_inputs(0, 8, DType::bf16, DType::bf16, 1);
  EXPECT_EQ(run(empty, mhc::Isa::automatic, 2).numel(), 0);
  Inputs flat = make_inputs(6, 24, DType::fp16, DType::fp16, 2);
  Tensor x3 = flat.x;
  x3.shape = {2, 3, 24};
  x3.strides = {72, 24, 1};
  Tensor y3 = make_tensor(DType::fp16, {2, 3, 24});
  ASSERT_TRUE(mhc::rms_norm_forward({x3.view(), flat.weight.view(), 1e-6}, {y3.view()}).ok());
  EXPECT_EQ(y3.raw(), run(flat, mhc::Isa::automatic, 1).raw());
}

TEST(RmsNorm, RejectsNamingTheTensorAndTouchesNoOutput) {
  Inputs in = make_inputs(4, 16, DType::bf16, DType::bf16, 5);
  Tensor y = make_tensor(DType::bf16, {4, 16}, 0x5a);
  const std::vector<uint32_t> before = y.raw();
  Tensor fp16_weight = make_tensor(DType::fp16, {16}), short_weight = make_tensor(DType::bf16, {15});
  Tensor wrong_y = make_tensor(DType::bf16, {4, 15}), x4 = make_tensor(DType::bf16, {1, 2, 4, 16});
  struct Bad {
    TensorView x, weight, y;
    double eps;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {in.x.view(), fp16_weight.view(), y.view(), 1e-6, "weight: expected dtype bf16 (x's) or fp32, got fp16"},
           {in.x.view(), short_weight.view(), y.view(), 1e-6, "weight: expected [D] with D=16, got [15]"},
           {in.x.view(), in.weight.view(), y.view(), -1.0, "eps: expected a finite value >= 0"},
           {in.x.view(), in.weight.view(), wrong_y.view(), 1e-6, "y: "},
           {x4.view(), in.weight.view(), y.view(), 1e-6, "x: expected [B,S,D] or [T,D], got [1,2,4,16]"},
           {in.x.view(), in.weight.view(), in.x.view(), 1e-6, "y: "}}) {
    const mhc::Status s = mhc::rms_norm_forward({bad.x, bad.weight, bad.eps}, {bad.y});
    ASSERT_FALSE(s.ok()) << bad.message;
    EXPECT_EQ(s.message().rfind(bad.message, 0), 0u) << s.message();
    EXPECT_EQ(y.raw(), before);
  }
}

}  // namespace
}  // namespace mhc_test::rms_norm
