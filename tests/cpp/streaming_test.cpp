// Outputs far larger than the caches may be written with streaming stores
// (MHC_STREAMING_STORES, ops/streaming.hpp); ctest runs this binary with it 0 and 1.
// Either way a large call's per-token outputs are bitwise those of the same tokens
// in calls too small to stream: MhcPost forward and backward, MhcPre forward, and
// MhcPreBackward's grad_x, on every SIMD family this build and CPU run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.hpp"

namespace mhc_test::streaming {
namespace {

// x [T, N, D] bf16 of 72 MiB: past the 64 MiB at which outputs of x's size stream;
// h_in 18 MiB, past its 8 MiB. Slices of 256 tokens stream nothing.
constexpr int64_t T = 2304, N = 4, D = 4096, F = 2 * N + N * N, kSlice = 256;

std::vector<mhc::Isa> simd_families() {
  std::vector<mhc::Isa> families;
  for (mhc::Isa isa : available_families())
    if (isa != mhc::Isa::portable && isa != mhc::Isa::reference) families.push_back(isa);
  return families;
}

// Tokens [t0, t0 + count) of a [T, ...] tensor as a view.
TensorView rows(Tensor& t, int64_t t0, int64_t count) {
  TensorView v = t.view();
  v.shape[0] = count;
  v.data = static_cast<char*>(v.data) + t0 * v.strides[0] * element_bytes(t.dtype());
  return v;
}

// Contiguous, its first element 64-byte aligned: streaming stores take aligned vectors only.
Tensor aligned(DType dtype, Shape shape) {
  Tensor t;
  t.exists = true;
  t.strides = contiguous_strides(shape);
  t.shape = std::move(shape);
  const int64_t esize = element_bytes(dtype);
  t.buffer = Buffer(dtype, t.numel() + 64 / esize, 0);
  const auto at = reinterpret_cast<uintptr_t>(t.buffer.bytes());
  t.offset = int64_t((64 - at % 64) % 64) / esize;
  return t;
}

Tensor filled(DType dtype, Shape shape, uint64_t seed, double lo, double hi) {
  Rng rng(seed);
  Tensor t = aligned(dtype, std::move(shape));
  fill_uniform(t, rng, lo, hi);
  return t;
}

TEST(StreamingStores, MhcPostLargeCallsGiveTheBitsOfSmallOnes) {
  Tensor x = filled(DType::bf16, {T, N, D}, 1, -1, 1), h_res = filled(DType::fp32, {T, N, N}, 2, 0, 0.5),
         h_out = filled(DType::bf16, {T, D}, 3, -1, 1), h_post = filled(DType::fp32, {T, N}, 4, 0, 2),
         grad_out = filled(DType::bf16, {T, N, D}, 5, -1, 1);
  for (mhc::Isa isa : simd_families()) {
    SCOPED_TRACE(mhc::isa_name(isa));
    Tensor out[2] = {aligned(DType::bf16, {T, N, D}), aligned(DType::bf16, {T, N, D})};
    Tensor grad_x[2] = {aligned(DType::bf16, {T, N, D}), aligned(DType::bf16, {T, N, D})};
    Tensor grad_h_res[2] = {aligned(DType::fp32, {T, N, N}), aligned(DType::fp32, {T, N, N})};
    Tensor grad_h_out[2] = {aligned(DType::bf16, {T, D}), aligned(DType::bf16, {T, D})};
    Tensor grad_h_post[2] = {aligned(DType::fp32, {T, N}), aligned(DType::fp32, {T, N})};
    for (int split = 0; split < 2; ++split)
      for (int64_t t0 = 0; t0 < T; t0 += split ? kSlice : T) {
        const int64_t count = split ? kSlice : T;
        const mhc::Options o = options_for(isa, 2);
        ASSERT_TRUE(mhc::post_forward({rows(x, t0, count), rows(h_res, t0, count), rows(h_out, t0, count),
                                       rows(h_post, t0, count)},
                                      {rows(out[split], t0, count)}, o)
                        .ok());
        ASSERT_TRUE(mhc::post_backward({rows(grad_out, t0, count), rows(x, t0, count), rows(h_res, t0, count),
                                        rows(h_out, t0, count), rows(h_post, t0, count)},
                                       {rows(grad_x[split], t0, count), rows(grad_h_res[split], t0, count),
                                        rows(grad_h_out[split], t0, count), rows(grad_h_post[split], t0, count)},
                                       o)
                        .ok());
      }
    EXPECT_EQ(out[0].raw(), out[1].raw()) << "out";
    EXPECT_EQ(grad_x[0].raw(), grad_x[1].raw()) << "grad_x";
    EXPECT_EQ(grad_h_res[0].raw(), grad_h_res[1].raw()) << "grad_h_res";
    EXPECT_EQ(grad_h_out[0].raw(), grad_h_out[1].raw()) << "grad_h_out";
    EXPECT_EQ(grad_h_post[0].raw(), grad_h_post[1].raw()) << "grad_h_post";
  }
}

TEST(StreamingStores, MhcPreLargeCallsGiveTheBitsOfSmallOnes) {
  const int64_t K = N * D;
  Tensor x = filled(DType::bf16, {T, N, D}, 11, -2, 2), phi = filled(DType::fp32, {F, K}, 12, -0.02, 0.02),
         alpha = filled(DType::fp32, {3}, 13, 0.25, 1.5), bias = filled(DType::fp32, {F}, 14, -1, 1),
         gamma = filled(DType::fp32, {N, D}, 15, 0.5, 1.5), grad_h_in = filled(DType::bf16, {T, D}, 16, -1, 1),
         grad_h_post = filled(DType::fp32, {T, N}, 17, -1, 1), grad_h_res = filled(DType::fp32, {T, N, N}, 18, -1, 1);
  for (mhc::Isa isa : simd_families()) {
    SCOPED_TRACE(mhc::isa_name(isa));
    const mhc::Options o = options_for(isa, 2);
    Tensor h_in[2] = {aligned(DType::bf16, {T, D}), aligned(DType::bf16, {T, D})};
    Tensor grad_x[2] = {aligned(DType::bf16, {T, N, D}), aligned(DType::bf16, {T, N, D})};
    Tensor h_post = aligned(DType::fp32, {T, N}), h_res = aligned(DType::fp32, {T, N, N}),
           inv_rms = aligned(DType::fp32, {T}), h_mix = aligned(DType::fp32, {T, F}),
           h_pre = aligned(DType::fp32, {T, N});
    Tensor grad_phi = aligned(DType::fp32, {F, K}), grad_alpha = aligned(DType::fp32, {3}),
           grad_bias = aligned(DType::fp32, {F}), grad_gamma = aligned(DType::fp32, {N, D});
    for (int split = 0; split < 2; ++split)
      for (int64_t t0 = 0; t0 < T; t0 += split ? kSlice : T) {
        const int64_t count = split ? kSlice : T;
        ASSERT_TRUE(mhc::pre_forward({rows(x, t0, count), phi.view(), alpha.view(), bias.view(), gamma.view()},
                                     {rows(h_in[split], t0, count), rows(h_post, t0, count), rows(h_res, t0, count),
                                      rows(inv_rms, t0, count), rows(h_mix, t0, count), rows(h_pre, t0, count)},
                                     o)
                        .ok());
        ASSERT_TRUE(mhc::pre_backward({rows(x, t0, count), phi.view(), alpha.view(), rows(grad_h_in, t0, count),
                                       rows(grad_h_post, t0, count), rows(grad_h_res, t0, count),
                                       rows(inv_rms, t0, count), rows(h_mix, t0, count), rows(h_pre, t0, count),
                                       rows(h_post, t0, count), gamma.view(), std::nullopt},
                                      {rows(grad_x[split], t0, count), grad_phi.view(), grad_alpha.view(),
                                       grad_bias.view(), grad_gamma.view()},
                                      o)
                        .ok());
      }
    EXPECT_EQ(h_in[0].raw(), h_in[1].raw()) << "h_in";
    EXPECT_EQ(grad_x[0].raw(), grad_x[1].raw()) << "grad_x";
  }
}

}  // namespace
}  // namespace mhc_test::streaming
