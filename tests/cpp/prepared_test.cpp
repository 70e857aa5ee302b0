// Weights prepared once (prepare_pre, options.prepared) on every kernel family this
// build and CPU run: every output of MhcPre, MhcPreSinkhorn, MhcPreSinglePass and
// MhcPostPre bitwise equal to the same call without the handle, at its first use
// and after (the forms kept), on 1 and 2 threads, for decode-sized and longer
// calls, HF32 and strided phi; through the C face too; a handle made again over
// the same buffers with new values serves the new values; a call whose weights
// are not the handle's, or an operator that takes none, is an error that writes
// nothing.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace mhc_test::prepared {
namespace {

struct Case {
  int64_t T = 7, N = 4, D = 40;
  DType dtype = DType::bf16;
  bool gamma = true, hf32 = false, strided_phi = false;
  std::string name(mhc::Isa isa, int threads) const {
    return std::string(mhc::isa_name(isa)) + "_T" + std::to_string(T) + "_N" + std::to_string(N) + "_D" +
           std::to_string(D) + "_" + dtype_name(dtype) + (gamma ? "_gamma" : "") + (hf32 ? "_hf32" : "") +
           (strided_phi ? "_stridedphi" : "") + "_threads" + std::to_string(threads);
  }
};

struct Weights {
  Tensor phi, alpha, bias, gamma;
};

Weights make_weights(const Case& c, uint64_t seed) {
  Rng rng(seed);
  const int64_t K = c.N * c.D, F = 2 * c.N + c.N * c.N;
  Weights w;
  Tensor phi = make_tensor(DType::fp32, {F, K});
  fill_uniform(phi, rng, -2.0 / std::sqrt(double(K)), 2.0 / std::sqrt(double(K)));
  w.phi = c.strided_phi ? relaid(phi, Layout::every_other, rng) : phi;
  w.alpha = make_tensor(DType::fp32, {3});
  fill_uniform(w.alpha, rng, 0.25, 1.5);
  w.bias = make_tensor(DType::fp32, {F});
  fill_uniform(w.bias, rng, -1, 1);
  if (c.gamma) {
    w.gamma = make_tensor(DType::fp32, {c.N, c.D});
    fill_uniform(w.gamma, rng, 0.5, 1.5);
  }
  return w;
}

std::shared_ptr<const mhc::PreparedPre> prepare(Weights& w) {
  std::shared_ptr<const mhc::PreparedPre> handle;
  const mhc::Status s = mhc::prepare_pre(w.phi.view(), w.alpha.view(), w.bias.view(), w.gamma.optional_view(), &handle);
  EXPECT_TRUE(s.ok()) << s.message();
  return handle;
}

mhc::Options options(const Case& c, mhc::Isa isa, int threads, const mhc::PreparedPre* prepared) {
  mhc::Options o = options_for(isa, threads);
  o.matmul_precision = c.hf32 ? mhc::MatmulPrecision::hf32 : mhc::MatmulPrecision::fp32;
  o.prepared = prepared;
  return o;
}

// MhcPre's outputs (the caches included) as bytes.
std::vector<std::vector<uint8_t>> pre_forward(const Case& c, Tensor& x, Weights& w, const mhc::Options& o) {
  const int64_t F = 2 * c.N + c.N * c.N;
  Tensor h_in = make_tensor(c.dtype, {c.T, c.D}, kOutputFill), h_post = make_tensor(DType::fp32, {c.T, c.N}, kOutputFill),
         h_res = make_tensor(DType::fp32, {c.T, c.N, c.N}, kOutputFill),
         inv_rms = make_tensor(DType::fp32, {c.T}, kOutputFill), h_mix = make_tensor(DType::fp32, {c.T, F}, kOutputFill),
         h_pre = make_tensor(DType::fp32, {c.T, c.N}, kOutputFill);
  const mhc::Status s = mhc::pre_forward({x.view(), w.phi.view(), w.alpha.view(), w.bias.view(), w.gamma.optional_view()},
                                         {h_in.view(), h_post.view(), h_res.view(), inv_rms.view(), h_mix.view(), h_pre.view()}, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return snapshot_all({&h_in, &h_post, &h_res, &inv_rms, &h_mix, &h_pre});
}

Tensor make_x(const Case& c, uint64_t seed) {
  Rng rng(seed);
  Tensor x = make_tensor(c.dtype, {c.T, c.N, c.D});
  fill_normal(x, rng, 1.0);
  return x;
}

std::vector<Case> pre_cases() {
  std::vector<Case> cases;
  // 1..64 tokens take the decode path; more, the items' (AMX: packed phi.gamma).
  for (int64_t T : {1, 7, 64, 65, 200})
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) cases.push_back({.T = T, .dtype = dtype});
  cases.push_back({.T = 130, .gamma = false});
  cases.push_back({.T = 3, .D = 141, .dtype = DType::fp16, .hf32 = true});
  cases.push_back({.T = 100, .hf32 = true});
  cases.push_back({.T = 5, .strided_phi = true});
  cases.push_back({.T = 96, .dtype = DType::fp32, .hf32 = true, .strided_phi = true});
  cases.push_back({.T = 80, .N = 2, .D = 2048});
  // Panels of phi (the simd families): a partial last block and column vector, and
  // N = 8's 80 rows (a last tile of two rows).
  cases.push_back({.T = 20, .D = 141, .dtype = DType::fp16});
  cases.push_back({.T = 12, .N = 8, .D = 96});
  return cases;
}

TEST(PreparedPre, MhcPreBitwiseAsUnpreparedOnEveryFamily) {
  for (mhc::Isa isa : available_families())
    for (const Case& c : pre_cases()) {
      Weights w = make_weights(c, uint64_t(c.T * 131 + c.D));
      Tensor x = make_x(c, uint64_t(c.T) + 7);
      const auto handle = prepare(w);
      for (int threads : {1, 2}) {
        SCOPED_TRACE(c.name(isa, threads));
        const auto want = pre_forward(c, x, w, options(c, isa, threads, nullptr));
        EXPECT_EQ(pre_forward(c, x, w, options(c, isa, threads, handle.get())), want) << "first use";
        EXPECT_EQ(pre_forward(c, x, w, options(c, isa, threads, handle.get())), want) << "forms kept";
      }
      // Another batch through the same handle: its own outputs, not the last call's.
      Case other = c;
      other.T = c.T + 33;
      Tensor x_other = make_x(other, 99);
      EXPECT_EQ(pre_forward(other, x_other, w, options(other, isa, 2, handle.get())),
                pre_forward(other, x_other, w, options(other, isa, 2, nullptr)))
          << other.name(isa, 2);
    }
}

TEST(PreparedPre, FusedOperatorsBitwiseAsUnprepared) {
  for (mhc::Isa isa : available_families())
    for (int64_t T : {2, 90}) {
      const Case c{.T = T, .gamma = false};
      Weights w = make_weights(c, 5);
      Tensor x = make_x(c, 11);
      const auto handle = prepare(w);
      SCOPED_TRACE(c.name(isa, 2));
      const int64_t F = 2 * c.N + c.N * c.N;
      auto sinkhorn = [&](const mhc::PreparedPre* p) {
        Tensor h_in = make_tensor(c.dtype, {T, c.D}, kOutputFill), h_post = make_tensor(DType::fp32, {T, c.N}, kOutputFill),
               h_res = make_tensor(DType::fp32, {T, c.N, c.N}, kOutputFill);
        const mhc::Status s = mhc::pre_sinkhorn_forward({x.view(), w.phi.view(), w.alpha.view(), w.bias.view(), 20},
                                                        {h_in.view(), h_post.view(), h_res.view(), {}, {}, {}, {}, {}},
                                                        options(c, isa, 2, p));
        EXPECT_TRUE(s.ok()) << s.message();
        return snapshot_all({&h_in, &h_post, &h_res});
      };
      EXPECT_EQ(sinkhorn(handle.get()), sinkhorn(nullptr)) << "pre_sinkhorn_forward";
      Rng rng(3);
      Tensor pre_mix = make_tensor(DType::fp32, {T, c.N});
      fill_uniform(pre_mix, rng, 0.05, 1.0);
      auto single_pass = [&](const mhc::PreparedPre* p) {
        Tensor h_in = make_tensor(c.dtype, {T, c.D}, kOutputFill), h_pre = make_tensor(DType::fp32, {T, c.N}, kOutputFill),
               h_post = make_tensor(DType::fp32, {T, c.N}, kOutputFill),
               h_res = make_tensor(DType::fp32, {T, c.N, c.N}, kOutputFill),
               inv_rms = make_tensor(DType::fp32, {T}, kOutputFill), h_mix = make_tensor(DType::fp32, {T, F}, kOutputFill);
        const mhc::Status s = mhc::pre_single_pass_forward(
            {x.view(), w.phi.view(), w.alpha.view(), w.bias.view(), std::nullopt, pre_mix.view(), 1e-6, 20},
            {h_in.view(), h_pre.view(), h_post.view(), h_res.view(), inv_rms.view(), h_mix.view()}, options(c, isa, 2, p));
        EXPECT_TRUE(s.ok()) << s.message();
        return snapshot_all({&h_in, &h_pre, &h_post, &h_res, &inv_rms, &h_mix});
      };
      EXPECT_EQ(single_pass(handle.get()), single_pass(nullptr)) << "pre_single_pass_forward";
      Tensor h_out = make_tensor(c.dtype, {T, c.D}), site_h_post = make_tensor(DType::fp32, {T, c.N});
      fill_normal(h_out, rng, 1.0);
      fill_uniform(site_h_post, rng, 0.0, 2.0);
      auto post_pre = [&](const mhc::PreparedPre* p) {
        Tensor x_next = make_tensor(c.dtype, {T, c.N, c.D}, kOutputFill),
               h_in = make_tensor(c.dtype, {T, c.D}, kOutputFill), h_pre = make_tensor(DType::fp32, {T, c.N}, kOutputFill),
               h_post = make_tensor(DType::fp32, {T, c.N}, kOutputFill),
               h_res = make_tensor(DType::fp32, {T, c.N, c.N}, kOutputFill),
               inv_rms = make_tensor(DType::fp32, {T}, kOutputFill), h_mix = make_tensor(DType::fp32, {T, F}, kOutputFill);
        const mhc::Status s = mhc::post_pre_forward(
            {x.view(), std::nullopt, h_out.view(), site_h_post.view(), w.phi.view(), w.alpha.view(), w.bias.view(),
             std::nullopt, pre_mix.view(), 1, 1e-6, 20},
            {x_next.view(), h_in.view(), h_pre.view(), h_post.view(), h_res.view(), inv_rms.view(), h_mix.view()},
            options(c, isa, 2, p));
        EXPECT_TRUE(s.ok()) << s.message();
        return snapshot_all({&x_next, &h_in, &h_pre, &h_post, &h_res, &inv_rms, &h_mix});
      };
      EXPECT_EQ(post_pre(handle.get()), post_pre(nullptr)) << "post_pre_forward";
    }
}

TEST(PreparedPre, ThroughTheCFace) {
  const Case c{.T = 70, .hf32 = true};
  Weights w = make_weights(c, 21);
  Tensor x = make_x(c, 22);
  const CTensor phi(w.phi.view()), alpha(w.alpha.view()), bias(w.bias.view()), gamma(w.gamma.view());
  mhc_prepared_pre* handle = nullptr;
  ASSERT_EQ(mhc_prepare_pre(phi.ptr, alpha.ptr, bias.ptr, gamma.ptr, &handle), MHC_OK) << mhc_last_error();
  for (mhc::Isa isa : available_families()) {
    const auto want = pre_forward(c, x, w, options(c, isa, 2, nullptr));
    const int64_t F = 2 * c.N + c.N * c.N;
    Tensor h_in = make_tensor(c.dtype, {c.T, c.D}, kOutputFill), h_post = make_tensor(DType::fp32, {c.T, c.N}, kOutputFill),
           h_res = make_tensor(DType::fp32, {c.T, c.N, c.N}, kOutputFill),
           inv_rms = make_tensor(DType::fp32, {c.T}, kOutputFill), h_mix = make_tensor(DType::fp32, {c.T, F}, kOutputFill),
           h_pre = make_tensor(DType::fp32, {c.T, c.N}, kOutputFill);
    mhc_options o = to_c(options(c, isa, 2, nullptr));
    o.prepared = handle;
    const CTensor cx(x.view()), ch_in(h_in.view()), ch_post(h_post.view()), ch_res(h_res.view()),
        cinv(inv_rms.view()), cmix(h_mix.view()), cpre(h_pre.view());
    ASSERT_EQ(mhc_pre_forward(cx.ptr, phi.ptr, alpha.ptr, bias.ptr, gamma.ptr, ch_in.ptr, ch_post.ptr, ch_res.ptr,
                              cinv.ptr, cmix.ptr, cpre.ptr, &o),
              MHC_OK)
        << mhc_last_error();
    EXPECT_EQ(snapshot_all({&h_in, &h_post, &h_res, &inv_rms, &h_mix, &h_pre}), want) << mhc::isa_name(isa);
  }
  // prepared on an operator that takes none: an error naming it, nothing written.
  Tensor z = make_tensor(DType::fp32, {c.T, c.N, c.N}), h = make_tensor(DType::fp32, {c.T, c.N, c.N}, kOutputFill);
  const auto before = h.buffer.snapshot();
  mhc_options o = mhc_default_options();
  o.prepared = handle;
  const CTensor cz(z.view()), ch(h.view());
  EXPECT_EQ(mhc_sinkhorn_forward(cz.ptr, 1e-6, 20, ch.ptr, nullptr, nullptr, &o), MHC_ERR_INVALID);
  EXPECT_EQ(std::string(mhc_last_error()).rfind("options.prepared:", 0), 0u) << mhc_last_error();
  EXPECT_EQ(h.buffer.snapshot(), before);
  // A caller built against the first mhc_options, which ends before prepared: not read.
  o.struct_size = uint32_t(offsetof(mhc_options, prepared));
  EXPECT_EQ(mhc_sinkhorn_forward(cz.ptr, 1e-6, 20, ch.ptr, nullptr, nullptr, &o), MHC_OK) << mhc_last_error();
  mhc_prepared_free(handle);
  mhc_prepared_free(nullptr);
  EXPECT_EQ(mhc_prepare_pre(nullptr, alpha.ptr, bias.ptr, nullptr, &handle), MHC_ERR_NULLPTR);
  EXPECT_NE(std::string(mhc_last_error()).find("phi"), std::string::npos) << mhc_last_error();
}

// The same buffers prepared again after new values: the new handle's forms, never
// the freed one's (a primitive cached for it is keyed by its id).
TEST(PreparedPre, NewHandleOverReusedBuffersServesNewValues) {
  for (mhc::Isa isa : available_families())
    for (const Case& c : {Case{.T = 4, .hf32 = true}, Case{.T = 100, .gamma = true}, Case{.T = 9, .strided_phi = true}}) {
      SCOPED_TRACE(c.name(isa, 2));
      Weights w = make_weights(c, 31);
      Tensor x = make_x(c, 32);
      auto handle = prepare(w);
      const auto first = pre_forward(c, x, w, options(c, isa, 2, handle.get()));
      handle.reset();
      for (int64_t i = 0; i < w.phi.numel(); ++i) w.phi.set(i, -w.phi.get(i) * 0.75);
      if (c.gamma)
        for (int64_t i = 0; i < w.gamma.numel(); ++i) w.gamma.set(i, 2.0 - w.gamma.get(i));
      handle = prepare(w);
      const auto again = pre_forward(c, x, w, options(c, isa, 2, handle.get()));
      EXPECT_EQ(again, pre_forward(c, x, w, options(c, isa, 2, nullptr)));
      EXPECT_NE(again, first);
    }
}

// Calls on several threads at once through one handle, its forms made by whichever
// comes first: every thread gets the unprepared bits.
TEST(PreparedPre, OneHandleServesManyThreads) {
  for (const Case& c : {Case{.T = 3, .hf32 = true}, Case{.T = 100, .strided_phi = true}}) {
    Weights w = make_weights(c, 51);
    Tensor x = make_x(c, 52);
    const auto want = pre_forward(c, x, w, options(c, mhc::Isa::automatic, 1, nullptr));
    const auto handle = prepare(w);
    std::vector<std::vector<std::vector<uint8_t>>> got(4);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < got.size(); ++i)
      threads.emplace_back([&, i] {
        Tensor own_x = x;
        for (int repeat = 0; repeat < 3; ++repeat)
          got[i] = pre_forward(c, own_x, w, options(c, mhc::Isa::automatic, 1, handle.get()));
      });
    for (std::thread& t : threads) t.join();
    for (const auto& g : got) EXPECT_EQ(g, want) << c.name(mhc::Isa::automatic, 1);
  }
}

TEST(PreparedPre, ErrorsNameTheTensorAndWriteNothing) {
  const Case c{.T = 3};
  Weights w = make_weights(c, 41), other = make_weights(c, 42);
  Tensor x = make_x(c, 43);
  const auto handle = prepare(w);
  const int64_t F = 2 * c.N + c.N * c.N;
  Tensor h_in = make_tensor(c.dtype, {c.T, c.D}, kOutputFill), h_post = make_tensor(DType::fp32, {c.T, c.N}, kOutputFill),
         h_res = make_tensor(DType::fp32, {c.T, c.N, c.N}, kOutputFill);
  const auto before = snapshot_all({&h_in, &h_post, &h_res});
  auto call = [&](Weights& given, std::optional<TensorView> gamma) {
    return mhc::pre_forward({x.view(), given.phi.view(), given.alpha.view(), given.bias.view(), gamma},
                            {h_in.view(), h_post.view(), h_res.view(), {}, {}, {}},
                            options(c, mhc::Isa::automatic, 0, handle.get()));
  };
  struct Expect {
    const char* name;
    mhc::Status status;
  };
  Weights mixed = w;  // shares nothing with w: its own buffers, the same values
  for (const Expect& e : {Expect{"phi", call(other, w.gamma.view())}, Expect{"gamma", call(w, std::nullopt)},
                          Expect{"gamma", call(w, other.gamma.view())}, Expect{"phi", call(mixed, w.gamma.view())}}) {
    EXPECT_EQ(e.status.code(), mhc::StatusCode::invalid_argument) << e.status.message();
    EXPECT_EQ(e.status.message().rfind(std::string(e.name) + ":", 0), 0u) << e.status.message();
  }
  EXPECT_EQ(snapshot_all({&h_in, &h_post, &h_res}), before);
  // The weights alone are checked when prepared.
  std::shared_ptr<const mhc::PreparedPre> bad;
  Tensor phi_1d = make_tensor(DType::fp32, {F});
  const mhc::Status s = mhc::prepare_pre(phi_1d.view(), w.alpha.view(), w.bias.view(), std::nullopt, &bad);
  EXPECT_EQ(s.code(), mhc::StatusCode::invalid_argument);
  EXPECT_EQ(s.message().rfind("phi:", 0), 0u) << s.message();
  EXPECT_EQ(bad, nullptr);
  Tensor alpha_half = make_tensor(DType::bf16, {3});
  EXPECT_EQ(mhc::prepare_pre(w.phi.view(), alpha_half.view(), w.bias.view(), std::nullopt, &bad).message().rfind("alpha:", 0),
            0u);
  // A backward takes no prepared weights.
  Tensor grad = make_tensor(DType::fp32, {c.T, c.N, c.N}), z = make_tensor(DType::fp32, {c.T, c.N, c.N}),
         grad_z = make_tensor(DType::fp32, {c.T, c.N, c.N}, kOutputFill);
  const auto grad_before = grad_z.buffer.snapshot();
  const mhc::Status b = mhc::sinkhorn_backward({grad.view(), std::nullopt, std::nullopt, z.view(), 1e-6, 20}, {grad_z.view()},
                                               options(c, mhc::Isa::automatic, 0, handle.get()));
  EXPECT_EQ(b.code(), mhc::StatusCode::invalid_argument);
  EXPECT_EQ(b.message().rfind("options.prepared:", 0), 0u) << b.message();
  EXPECT_EQ(grad_z.buffer.snapshot(), grad_before);
}

}  // namespace
}  // namespace mhc_test::prepared
