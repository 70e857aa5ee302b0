// The two- and one-entry alpha (SPEC §6), on every kernel family. Two entries:
// h_post = 2 sigma(z_post) without hc_eps; an h_res given to the forward is left
// untouched, a grad_h_res given to the backward is not read. One entry (the
// head): only h_in and the caches; an h_post or h_res given is left untouched,
// grad_h_post, grad_h_res and h_post given to the backward are not read.
#include <cmath>

#include "test_util.hpp"

namespace mhc_test {
namespace {

// Every tensor of `with` holds the bits of its twin in `plain`.
void expect_same_bits(const Operands& with, const Operands& plain, mhc::Isa isa) {
  for (const TensorMember& m : tensor_members())
    EXPECT_EQ((with.*m.member).raw(), (plain.*m.member).raw()) << mhc::isa_name(isa) << " " << m.name;
}

Config two_entry_config(DType dtype) {
  Config c;
  c.B = 2; c.S = 5; c.N = 4; c.D = 40; c.dtype = dtype;
  c.form = FForm::two_entry;
  c.grad_x_post = true;
  c.hc_eps = 0.25;  // large, so that a wrongly added hc_eps shows in h_post
  c.seed = 71 + int(dtype);
  return c;
}

// h_post from float64 over the library's own h_mix and inv_rms: 2 sigma(alpha_post r m + b).
TEST(TwoEntryAlpha, HPostIsTwiceTheSigmoidWithoutHcEps) {
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::bf16, DType::fp32}) {
      Operands o = make_operands(two_entry_config(dtype));
      o.options.isa = isa;
      ASSERT_TRUE(run_forward_with_caches(o).ok());
      const Config& c = o.cfg;
      for (int64_t t = 0; t < c.T(); ++t)
        for (int64_t n = 0; n < c.N; ++n) {
          const double z = o.alpha.get(1) * o.inv_rms.get(t) * o.h_mix.get(t * c.F() + c.N + n) + o.bias.get(c.N + n);
          const double want = 2.0 / (1.0 + std::exp(-z));
          EXPECT_NEAR(o.h_post.get(t * c.N + n), want, 1e-5) << mhc::isa_name(isa) << " token " << t << " n " << n;
        }
    }
}

TEST(TwoEntryAlpha, AnHResGivenIsLeftUntouched) {
  for (mhc::Isa isa : available_families()) {
    Operands plain = make_operands(two_entry_config(DType::bf16));
    plain.options.isa = isa;
    ASSERT_TRUE(run_forward_with_caches(plain).ok());
    Operands with = make_operands(two_entry_config(DType::bf16));
    with.options.isa = isa;
    const Config& c = with.cfg;
    // Any shape and dtype: it is not read, checked or written.
    Tensor h_res = make_tensor(DType::fp16, c.token_shape({c.N, c.N}), 0x3c);
    const std::vector<uint32_t> before = h_res.raw();
    mhc::PreForwardOutputs out = forward_outputs(with);
    out.h_res = h_res.view();
    out.inv_rms = with.inv_rms.view();
    out.h_mix = with.h_mix.view();
    out.h_pre = with.h_pre.view();
    const mhc::Status st = mhc::pre_forward(forward_inputs(with), out, with.options);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(h_res.raw(), before) << mhc::isa_name(isa);
    expect_same_bits(with, plain, isa);
  }
}

TEST(TwoEntryAlpha, AGradHResGivenIsNotRead) {
  for (mhc::Isa isa : available_families()) {
    Operands plain = make_operands(two_entry_config(DType::fp16));
    plain.options.isa = isa;
    ASSERT_TRUE(run_forward_with_caches(plain).ok());
    Operands with = plain;
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(plain), backward_outputs(plain), plain.options).ok());
    const Config& c = with.cfg;
    Tensor grad_h_res = make_tensor(DType::fp32, c.token_shape({c.N, c.N}));
    for (int64_t i = 0; i < grad_h_res.numel(); ++i) grad_h_res.set(i, NAN);
    mhc::PreBackwardInputs in = backward_inputs(with);
    in.grad_h_res = grad_h_res.view();
    const mhc::Status st = mhc::pre_backward(in, backward_outputs(with), with.options);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_same_bits(with, plain, isa);
  }
}

Config head_config(DType dtype) {
  Config c = two_entry_config(dtype);
  c.form = FForm::head;
  c.seed = 91 + int(dtype);
  return c;
}

TEST(Head, AnHPostOrHResGivenIsLeftUntouched) {
  for (mhc::Isa isa : available_families()) {
    Operands plain = make_operands(head_config(DType::bf16));
    plain.options.isa = isa;
    ASSERT_TRUE(run_forward_with_caches(plain).ok());
    Operands with = make_operands(head_config(DType::bf16));
    with.options.isa = isa;
    const Config& c = with.cfg;
    Tensor h_post = make_tensor(DType::fp32, c.token_shape({c.N}), 0x3c);
    Tensor h_res = make_tensor(DType::bf16, c.token_shape({7}), 0x3d);  // any shape and dtype
    const std::vector<uint32_t> post_before = h_post.raw(), res_before = h_res.raw();
    mhc::PreForwardOutputs out{with.h_in.view(), h_post.view(), h_res.view(), with.inv_rms.view(),
                               with.h_mix.view(), with.h_pre.view()};
    const mhc::Status st = mhc::pre_forward(forward_inputs(with), out, with.options);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(h_post.raw(), post_before) << mhc::isa_name(isa);
    EXPECT_EQ(h_res.raw(), res_before) << mhc::isa_name(isa);
    expect_same_bits(with, plain, isa);
  }
}

TEST(Head, ThePostAndResidualInputsAreNotRead) {
  for (mhc::Isa isa : available_families()) {
    Operands plain = make_operands(head_config(DType::fp16));
    plain.options.isa = isa;
    ASSERT_TRUE(run_forward_with_caches(plain).ok());
    Operands with = plain;
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(plain), backward_outputs(plain), plain.options).ok());
    const Config& c = with.cfg;
    Tensor nan_rows = make_tensor(DType::fp32, c.token_shape({c.N}));
    for (int64_t i = 0; i < nan_rows.numel(); ++i) nan_rows.set(i, NAN);
    mhc::PreBackwardInputs in = backward_inputs(with);
    in.grad_h_post = nan_rows.view();
    in.grad_h_res = nan_rows.view();
    in.h_post = nan_rows.view();
    const mhc::Status st = mhc::pre_backward(in, backward_outputs(with), with.options);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_same_bits(with, plain, isa);
    EXPECT_EQ(with.grad_alpha.numel(), 1);
  }
}

// The C face takes NULL for the head's absent tensors.
TEST(Head, TheCFaceTakesNullForTheAbsentBranches) {
  Operands o = make_operands(head_config(DType::bf16));
  ASSERT_TRUE(run_forward_with_caches(o).ok());
  Operands c_run = make_operands(head_config(DType::bf16));
  auto c_of = [](Tensor& t) {
    mhc_tensor m{};
    const TensorView v = t.view();
    m.data = v.data; m.dtype = int32_t(v.dtype); m.rank = v.rank;
    for (int i = 0; i < v.rank; ++i) { m.shape[i] = v.shape[i]; m.strides[i] = v.strides[i]; }
    return m;
  };
  const mhc_tensor x = c_of(c_run.x), phi = c_of(c_run.phi), alpha = c_of(c_run.alpha), bias = c_of(c_run.bias),
                   gamma = c_of(c_run.gamma), h_in = c_of(c_run.h_in), inv_rms = c_of(c_run.inv_rms),
                   h_mix = c_of(c_run.h_mix), h_pre = c_of(c_run.h_pre);
  mhc_options options = mhc_default_options();
  options.hc_eps = o.cfg.hc_eps;
  ASSERT_EQ(mhc_pre_forward(&x, &phi, &alpha, &bias, &gamma, &h_in, nullptr, nullptr, &inv_rms, &h_mix, &h_pre,
                            &options), 0) << mhc_last_error();
  EXPECT_EQ(c_run.h_in.raw(), o.h_in.raw());
  EXPECT_EQ(c_run.h_mix.raw(), o.h_mix.raw());
  const mhc_tensor grad_h_in = c_of(c_run.grad_h_in), grad_x_post = c_of(c_run.grad_x_post),
                   grad_x = c_of(c_run.grad_x), grad_phi = c_of(c_run.grad_phi),
                   grad_alpha = c_of(c_run.grad_alpha), grad_bias = c_of(c_run.grad_bias),
                   grad_gamma = c_of(c_run.grad_gamma);
  ASSERT_EQ(mhc_pre_backward(&x, &phi, &alpha, &grad_h_in, nullptr, nullptr, &inv_rms, &h_mix, &h_pre, nullptr,
                             &gamma, &grad_x_post, &grad_x, &grad_phi, &grad_alpha, &grad_bias, &grad_gamma, &options),
            0) << mhc_last_error();
  ASSERT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok());
  EXPECT_EQ(c_run.grad_x.raw(), o.grad_x.raw());
  EXPECT_EQ(c_run.grad_phi.raw(), o.grad_phi.raw());
  EXPECT_EQ(c_run.grad_alpha.raw(), o.grad_alpha.raw());
}

}  // namespace
}  // namespace mhc_test
