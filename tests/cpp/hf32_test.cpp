// HF32 operands (SPEC §7: matmul_precision hf32, CANN's opImplMode 1) on every
// kernel family, against a float64 golden written here on HF32-rounded operands:
// h_mix = hf32(phi) . hf32(fp32(v * gamma)); gu = hf32(phi)^T hf32(G) and
// grad_phi = sum_t hf32(G_t) hf32(fp32(v_t * gamma))^T. The golden's G is formed
// in fp32 as SPEC's formulas give it with grad_h_in = 0 (then dL/dh_pre is exactly
// 0 and G depends on no long sum), so its rounding to HF32 is the library's; the
// products and sums are then within fp32 rounding of the golden's.
#include <cmath>
#include <cstring>

#include "test_util.hpp"

namespace mhc_test {
namespace {

constexpr double kTermsTolerance = 1e-6;  // ~8 fp32 ulps of the sum of |terms|

// SPEC §7's rounding, on the bit pattern; NaN kept.
float hf32(float a) {
  int32_t b;
  std::memcpy(&b, &a, 4);
  if (std::isnan(a)) return a;
  b = ((b >> 12) + 1) >> 1 << 13;
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

Config hf32_config(DType dtype, bool gamma, uint64_t seed) {
  Config c;
  c.B = 1; c.S = 37; c.N = 4; c.D = 72; c.dtype = dtype; c.gamma = gamma;
  c.grad_x_post = true;
  c.seed = seed;
  return c;
}

Operands operands(const Config& c, mhc::Isa isa, mhc::MatmulPrecision precision, int threads = 2) {
  Operands o = make_operands(c);
  o.options.isa = isa;
  o.options.matmul_precision = precision;
  o.options.num_threads = threads;
  for (int64_t i = 0; i < o.grad_h_in.numel(); ++i) o.grad_h_in.set(i, 0.0);
  return o;
}

// The golden's fp32 operands of one token: u = hf32(fp32(v * gamma)).
double u_operand(const Operands& o, int64_t t, int64_t k) {
  const float v = float(o.x.get(t * o.cfg.K() + k));
  const float gamma = o.gamma.present() ? float(o.gamma.get(k)) : 1.0f;
  return hf32(v * gamma);
}

void expect_within(const char* name, const Tensor& got, const std::vector<double>& want,
                   const std::vector<double>& magnitude, const std::string& where) {
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = std::max(ulp_of(got.dtype(), want[i]), kTermsTolerance * magnitude[i]) + 1e-30;
    const double err = std::fabs(got.get(int64_t(i)) - want[i]);
    if (!(err <= bound) && ++failures <= 5)
      ADD_FAILURE() << where << " " << name << "[" << i << "] = " << got.get(int64_t(i)) << ", golden " << want[i]
                    << ", error " << err << " > " << bound;
  }
  EXPECT_EQ(failures, 0) << where << " " << name;
}

// K = 288 (whole vectors), and K = 111 (a partial last vector) with the two-
// and one-entry alpha.
std::vector<Config> forward_configs(DType dtype, bool gamma, uint64_t seed) {
  Config whole = hf32_config(dtype, gamma, seed), two = whole, head = whole;
  two.N = 3; two.D = 37; two.form = FForm::two_entry; two.seed = seed + 1000;
  head.N = 3; head.D = 37; head.form = FForm::head; head.seed = seed + 2000;
  return {whole, two, head};
}

TEST(Hf32, ForwardHMixIsTheProductOfRoundedOperands) {
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
      for (bool gamma : {true, false})
      for (const Config& c : forward_configs(dtype, gamma, 300 + int(dtype) * 2 + gamma)) {
        const std::string where = std::string(mhc::isa_name(isa)) + " " + c.name();
        Operands o = operands(c, isa, mhc::MatmulPrecision::hf32);
        ASSERT_TRUE(run_forward_with_caches(o).ok()) << where;
        const int64_t T = c.T(), F = c.F(), K = c.K();
        std::vector<double> want(static_cast<size_t>(T * F)), magnitude(static_cast<size_t>(T * F));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t f = 0; f < F; ++f) {
            double sum = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double term = double(hf32(float(o.phi.get(f * K + k)))) * u_operand(o, t, k);
              sum += term;
              mag += std::fabs(term);
            }
            want[size_t(t * F + f)] = sum;
            magnitude[size_t(t * F + f)] = mag;
          }
        expect_within("h_mix", o.h_mix, want, magnitude, where);
        // Only the product changes: inv_rms is mode 0's, bit for bit, from the same
        // kernels (the amx family runs HF32 calls on its avx512 base).
        Operands fp32 = operands(c, isa == mhc::Isa::amx ? mhc::Isa::avx512 : isa, mhc::MatmulPrecision::fp32);
        ASSERT_TRUE(run_forward_with_caches(fp32).ok());
        EXPECT_EQ(o.inv_rms.raw(), fp32.inv_rms.raw()) << where;
      }
}

TEST(Hf32, BackwardProductsTakeRoundedOperands) {
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
      for (bool gamma : {true, false}) {
        const Config c = hf32_config(dtype, gamma, 400 + int(dtype) * 2 + gamma);
        const std::string where = std::string(mhc::isa_name(isa)) + " " + c.name();
        Operands o = operands(c, isa, mhc::MatmulPrecision::hf32);
        ASSERT_TRUE(run_forward_with_caches(o).ok()) << where;
        ASSERT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok()) << where;
        const int64_t T = c.T(), N = c.N, F = c.F(), K = c.K(), R = c.R();
        // G in fp32 as SPEC §3 forms it (g_pre = 0), rounded to HF32; c in float64.
        std::vector<double> G(static_cast<size_t>(T * F)), c_token(static_cast<size_t>(T)), c_magnitude(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) {
          const float r = float(o.inv_rms.get(t));
          double g_r = 0, g_r_mag = 0;
          for (int64_t f = 0; f < F; ++f) {
            const int branch = f < N ? 0 : f < 2 * N ? 1 : 2;
            float gz = 0.0f;  // dL/dh_pre = 0
            if (branch == 1) {
              const float h_post = float(o.h_post.get(t * N + f - N)), grad = float(o.grad_h_post.get(t * N + f - N));
              gz = grad * h_post * (1.0f - h_post * 0.5f);
            } else if (branch == 2) {
              gz = float(o.grad_h_res.get(t * R + f - 2 * N));
            }
            const float gw = float(o.alpha.get(branch)) * gz;
            G[size_t(t * F + f)] = hf32(r * gw);
            g_r += double(gw) * o.h_mix.get(t * F + f);
            g_r_mag += std::fabs(double(gw) * o.h_mix.get(t * F + f));
          }
          const double r3 = double(r) * r * r;
          c_token[size_t(t)] = -r3 * g_r / double(K);
          c_magnitude[size_t(t)] = r3 * g_r_mag / double(K);
        }
        std::vector<double> grad_phi(static_cast<size_t>(F * K), 0.0), grad_phi_mag(static_cast<size_t>(F * K), 0.0);
        std::vector<double> grad_gamma(static_cast<size_t>(K), 0.0), grad_gamma_mag(static_cast<size_t>(K), 0.0);
        std::vector<double> grad_x(static_cast<size_t>(T * K)), grad_x_mag(static_cast<size_t>(T * K));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < K; ++k) {
            double gu = 0, gu_mag = 0;
            for (int64_t f = 0; f < F; ++f) {
              const double term = double(hf32(float(o.phi.get(f * K + k)))) * G[size_t(t * F + f)];
              gu += term;
              gu_mag += std::fabs(term);
            }
            const double v = o.x.get(t * K + k), u = u_operand(o, t, k);
            const double gamma_k = o.gamma.present() ? o.gamma.get(k) : 1.0;
            for (int64_t f = 0; f < F; ++f) {
              grad_phi[size_t(f * K + k)] += G[size_t(t * F + f)] * u;
              grad_phi_mag[size_t(f * K + k)] += std::fabs(G[size_t(t * F + f)] * u);
            }
            grad_gamma[size_t(k)] += v * gu;
            grad_gamma_mag[size_t(k)] += std::fabs(v) * gu_mag;
            const double post = o.grad_x_post.get(t * K + k);
            grad_x[size_t(t * K + k)] = gamma_k * gu + c_token[size_t(t)] * v + post;
            grad_x_mag[size_t(t * K + k)] = gamma_k * gu_mag + c_magnitude[size_t(t)] * std::fabs(v) + std::fabs(post);
          }
        expect_within("grad_phi", o.grad_phi, grad_phi, grad_phi_mag, where);
        expect_within("grad_x", o.grad_x, grad_x, grad_x_mag, where);
        if (gamma) expect_within("grad_gamma", o.grad_gamma, grad_gamma, grad_gamma_mag, where);
      }
}

// Any grad_h_in and every F form, against the reference family's HF32: the
// families' G may round to HF32 one step away from the reference's where fp32
// rounding leaves it near a midpoint, a few elements of 2^-11 each, far below
// the distance between fp32 and HF32 products (DiffersFromFp32AsHf32Should).
TEST(Hf32, BackwardOfEveryFormIsTheReferenceFamilys) {
  for (FForm form : {FForm::square, FForm::permutation, FForm::two_entry, FForm::head})
    for (DType dtype : {DType::bf16, DType::fp32}) {
      Config c = hf32_config(dtype, true, 700 + int(form) * 3 + int(dtype));
      c.N = 3; c.D = 37; c.form = form;
      Operands want = make_operands(c);
      want.options.isa = mhc::Isa::reference;
      want.options.matmul_precision = mhc::MatmulPrecision::hf32;
      ASSERT_TRUE(run_forward_with_caches(want).ok());
      ASSERT_TRUE(mhc::pre_backward(backward_inputs(want), backward_outputs(want), want.options).ok());
      for (mhc::Isa isa : available_families()) {
        Operands got = make_operands(c);
        got.options.isa = isa;
        got.options.matmul_precision = mhc::MatmulPrecision::hf32;
        ASSERT_TRUE(run_forward_with_caches(got).ok());
        // The same caches for both: the backward is compared on equal inputs.
        got.inv_rms = want.inv_rms; got.h_mix = want.h_mix; got.h_pre = want.h_pre; got.h_post = want.h_post;
        ASSERT_TRUE(mhc::pre_backward(backward_inputs(got), backward_outputs(got), got.options).ok());
        for (const TensorMember& m : {TensorMember{"grad_x", &Operands::grad_x}, TensorMember{"grad_phi", &Operands::grad_phi},
                                      TensorMember{"grad_gamma", &Operands::grad_gamma}, TensorMember{"grad_alpha", &Operands::grad_alpha}}) {
          const double err = normwise_relative_error((got.*m.member).values(), (want.*m.member).values());
          EXPECT_LT(err, dtype == DType::bf16 && m.name == std::string("grad_x") ? 4e-3 : 1e-4)
              << mhc::isa_name(isa) << " " << c.name() << " " << m.name;
        }
      }
    }
}

// HF32 moves the products by about 2^-11 of their terms: far more than fp32
// rounding, far less than 2^-8.
TEST(Hf32, DiffersFromFp32AsHf32Should) {
  for (mhc::Isa isa : available_families()) {
    const Config c = hf32_config(DType::bf16, true, 501);
    Operands hf = operands(c, isa, mhc::MatmulPrecision::hf32), fp = operands(c, isa, mhc::MatmulPrecision::fp32);
    for (Operands* o : {&hf, &fp}) {
      ASSERT_TRUE(run_forward_with_caches(*o).ok());
      ASSERT_TRUE(mhc::pre_backward(backward_inputs(*o), backward_outputs(*o), o->options).ok());
    }
    for (const TensorMember& m : {TensorMember{"h_mix", &Operands::h_mix}, TensorMember{"grad_phi", &Operands::grad_phi}}) {
      const std::vector<double> a = (hf.*m.member).values(), b = (fp.*m.member).values();
      double scale = 0, largest = 0;
      for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::fabs(b[i]));
      for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::fabs(a[i] - b[i]));
      EXPECT_GT(largest, 1e-5 * scale) << mhc::isa_name(isa) << " " << m.name << ": HF32 left the products as fp32";
      EXPECT_LT(largest, 1.0 / 256 * scale) << mhc::isa_name(isa) << " " << m.name;
    }
  }
}

// The same bits for any thread count; the amx family runs HF32 calls on its
// avx512 base, so their bits are avx512's.
TEST(Hf32, BitsIndependentOfThreadsAndAmxIsItsBase) {
  const Config c = hf32_config(DType::fp16, true, 601);
  std::vector<std::vector<uint32_t>> avx512_bits;
  for (mhc::Isa isa : available_families()) {
    std::vector<std::vector<uint32_t>> runs[2];
    for (int threads : {1, 2}) {
      Operands o = operands(c, isa, mhc::MatmulPrecision::hf32, threads);
      ASSERT_TRUE(run_forward_with_caches(o).ok());
      ASSERT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok());
      for (const Tensor* t : {&o.h_in, &o.h_mix, &o.grad_x, &o.grad_phi, &o.grad_gamma})
        runs[threads - 1].push_back(t->raw());
    }
    EXPECT_EQ(runs[0], runs[1]) << mhc::isa_name(isa);
    if (isa == mhc::Isa::avx512) avx512_bits = runs[0];
  }
  if (mhc::isa_available(mhc::Isa::amx) && !avx512_bits.empty()) {
    Operands o = operands(c, mhc::Isa::amx, mhc::MatmulPrecision::hf32);
    ASSERT_TRUE(run_forward_with_caches(o).ok());
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok());
    std::vector<std::vector<uint32_t>> amx_bits;
    for (const Tensor* t : {&o.h_in, &o.h_mix, &o.grad_x, &o.grad_phi, &o.grad_gamma}) amx_bits.push_back(t->raw());
    EXPECT_EQ(amx_bits, avx512_bits);
  }
}

}  // namespace
}  // namespace mhc_test
