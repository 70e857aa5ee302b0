// The two-entry alpha (SPEC §6), on every kernel family: h_post = 2 sigma(z_post)
// without hc_eps; an h_res given to the forward is left untouched, a grad_h_res
// given to the backward is not read.
#include <cmath>

#include "test_util.hpp"

namespace mhc_test {
namespace {

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
    for (const TensorMember& m : tensor_members())
      EXPECT_EQ((with.*m.member).raw(), (plain.*m.member).raw()) << mhc::isa_name(isa) << " " << m.name;
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
    for (const TensorMember& m : tensor_members())
      EXPECT_EQ((with.*m.member).raw(), (plain.*m.member).raw()) << mhc::isa_name(isa) << " " << m.name;
  }
}

}  // namespace
}  // namespace mhc_test
