// MhcPost and MhcPostBackward (SPEC §11) through the C++ and the C face, on every
// kernel family this build and CPU run (Options::isa, in one process):
//   - against float64 (layer_util.hpp) within the rounding bounds of SPEC's fp32
//     order, and bitwise against an fp32 model of that order written here;
//   - H enters transposed (a non-symmetric H that fails otherwise);
//   - grad_x in fp32 and in x's dtype; grad_h_res given or not, with or without h_res;
//   - every family the same bits; 1, 2, 3, 7 threads; a token alone or anywhere in
//     a batch; strided and broadcast views (staged) as contiguous; [B,S,..] as
//     [T,..]; an empty batch;
//   - every validation rule with its message, nothing written on an error.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "layer_util.hpp"

namespace mhc_test::layer {
namespace {

struct PCase {
  int64_t B = 1, S = 5;
  bool bsnd = false;
  int64_t N = 4, D = 64;
  DType dtype = DType::bf16;
  bool h_res = true;
  bool grad_x_fp32 = false;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  std::string name() const {
    return "N" + std::to_string(N) + "_D" + std::to_string(D) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_" + dtype_name(dtype) + (h_res ? "_hres" : "_identity") +
           (grad_x_fp32 ? "_gx32" : "");
  }
};
void PrintTo(const PCase& c, std::ostream* os) { *os << c.name(); }

Shape tok(const PCase& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }

Bag make_bag(const PCase& c) {
  Bag b;
  Rng rng(c.seed * 104729 + 11);
  b["x"] = make_tensor(c.dtype, tok(c, {c.N, c.D}));
  fill_normal(b["x"], rng, 2.0);
  if (c.h_res) {
    b["h_res"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}));
    fill_uniform(b["h_res"], rng, -0.3, 1.1);
  }
  b["h_out"] = make_tensor(c.dtype, tok(c, {c.D}));
  fill_normal(b["h_out"], rng, 3.0);
  b["h_post"] = make_tensor(DType::fp32, tok(c, {c.N}));
  fill_uniform(b["h_post"], rng, 0.0, 2.0);
  b["grad_out"] = make_tensor(c.dtype, tok(c, {c.N, c.D}));
  fill_normal(b["grad_out"], rng, 1.0);
  b["out"] = make_tensor(c.dtype, tok(c, {c.N, c.D}), kOutputFill);
  b["grad_x"] = make_tensor(c.grad_x_fp32 ? DType::fp32 : c.dtype, tok(c, {c.N, c.D}), kOutputFill);
  b["grad_h_res"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}), kOutputFill);
  b["grad_h_out"] = make_tensor(c.dtype, tok(c, {c.D}), kOutputFill);
  b["grad_h_post"] = make_tensor(DType::fp32, tok(c, {c.N}), kOutputFill);
  return b;
}

std::optional<TensorView> h_res_of(Bag& b) {
  return b.t.count("h_res") ? std::optional<TensorView>(b["h_res"].view()) : std::nullopt;
}

mhc::Options options_for(mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  return o;
}

mhc::Status forward(Bag& b, const mhc::Options& o) {
  return mhc::post_forward({b["x"].view(), h_res_of(b), b["h_out"].view(), b["h_post"].view()}, {b["out"].view()}, o);
}
mhc::Status backward(Bag& b, const mhc::Options& o, bool with_grad_h_res = true) {
  return mhc::post_backward(
      {b["grad_out"].view(), b["x"].view(), h_res_of(b), b["h_out"].view(), b["h_post"].view()},
      {b["grad_x"].view(), with_grad_h_res ? std::optional<TensorView>(b["grad_h_res"].view()) : std::nullopt,
       b["grad_h_out"].view(), b["grad_h_post"].view()},
      o);
}
Bag run_both(const PCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = forward(b, o);
  EXPECT_TRUE(s.ok()) << s.message();
  s = backward(b, o);
  EXPECT_TRUE(s.ok()) << s.message();
  return b;
}
const std::vector<std::string> kOutputs = {"out", "grad_x", "grad_h_res", "grad_h_out", "grad_h_post"};

// ------------------------------------------------------------------ float64 bounds
//
// An fp32 chain of n roundings (a product and n − 1 sums, or the products of a
// sum) is within γ_n = n u / (1 − n u) of the exact value relative to Σ|terms|;
// the cast to a 16-bit dtype then adds half an ulp of that dtype at the result.
// out: n = N + 1 (h_post·h_out, then N products added) or 2 without h_res;
// grad_x: N products summed; grad_h_out: N; grad_h_res and grad_h_post: D.
double gamma_n(int64_t n) { return double(n) * kU / (1.0 - double(n) * kU); }
double half_ulp(DType t, double v) { return t == DType::fp32 ? 0.0 : 0.5 * ulp_of(t, v); }

struct Worst {
  std::map<std::string, double> over_bound, abs;
  void note(const std::string& name, double err, double bound) {
    over_bound[name] = std::max(over_bound[name], bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0));
    abs[name] = std::max(abs[name], err);
  }
};

void expect_within(Worst& w, const std::string& name, double got, double want, double mag, int64_t n, DType dtype,
                   const std::string& where) {
  const double fp32_err = gamma_n(n) * mag;
  const double bound = fp32_err + half_ulp(dtype, std::max(std::fabs(got), std::fabs(want)) + fp32_err);
  const double err = std::fabs(got - want);
  w.note(name, err, bound);
  ASSERT_LE(err, bound) << name << " " << where << ": " << got << " vs float64 " << want;
}

void check_against_float64(Bag& b, const PCase& c, Worst& w, const std::string& family) {
  const int64_t N = c.N, D = c.D;
  const std::vector<double> x = b["x"].values(), h_out = b["h_out"].values(), h_post = b["h_post"].values(),
                            g = b["grad_out"].values();
  const std::vector<double> H = c.h_res ? b["h_res"].values() : std::vector<double>();
  const DType gx_dtype = b["grad_x"].dtype();
  for (int64_t t = 0; t < c.T(); ++t) {
    const double* xt = &x[size_t(t * N * D)];
    const double* Ht = c.h_res ? &H[size_t(t * N * N)] : nullptr;
    const double* ho = &h_out[size_t(t * D)];
    const double* hp = &h_post[size_t(t * N)];
    const double* gt = &g[size_t(t * N * D)];
    const std::vector<double> out = post_forward64(xt, Ht, ho, hp, N, D);
    const PostGrads64 r = post_backward64(gt, xt, Ht, ho, hp, N, D);
    for (int64_t j = 0; j < N; ++j)
      for (int64_t d = 0; d < D; ++d) {
        const std::string where = family + " token " + std::to_string(t) + " (" + std::to_string(j) + "," + std::to_string(d) + ")";
        double mag = std::fabs(hp[j] * ho[d]), gmag = 0;
        if (Ht) {
          for (int64_t i = 0; i < N; ++i) mag += std::fabs(Ht[i * N + j] * xt[i * D + d]);
          for (int64_t k = 0; k < N; ++k) gmag += std::fabs(Ht[j * N + k] * gt[k * D + d]);
        } else {
          mag += std::fabs(xt[j * D + d]);
          gmag = std::fabs(gt[j * D + d]);
        }
        expect_within(w, "out", b["out"].get((t * N + j) * D + d), out[size_t(j * D + d)], mag, Ht ? N + 1 : 2, c.dtype, where);
        expect_within(w, "grad_x", b["grad_x"].get((t * N + j) * D + d), r.grad_x[size_t(j * D + d)], gmag, N, gx_dtype, where);
      }
    for (int64_t d = 0; d < D; ++d) {
      double mag = 0;
      for (int64_t j = 0; j < N; ++j) mag += std::fabs(hp[j] * gt[j * D + d]);
      expect_within(w, "grad_h_out", b["grad_h_out"].get(t * D + d), r.grad_h_out[size_t(d)], mag, N, c.dtype,
                    family + " token " + std::to_string(t) + " d " + std::to_string(d));
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double mag = 0;
        for (int64_t d = 0; d < D; ++d) mag += std::fabs(xt[i * D + d] * gt[j * D + d]);
        expect_within(w, "grad_h_res", b["grad_h_res"].get((t * N + i) * N + j), r.grad_h_res[size_t(i * N + j)], mag, D,
                      DType::fp32, family + " token " + std::to_string(t));
      }
    for (int64_t j = 0; j < N; ++j) {
      double mag = 0;
      for (int64_t d = 0; d < D; ++d) mag += std::fabs(ho[d] * gt[j * D + d]);
      expect_within(w, "grad_h_post", b["grad_h_post"].get(t * N + j), r.grad_h_post[size_t(j)], mag, D, DType::fp32,
                    family + " token " + std::to_string(t));
    }
  }
}

// ------------------------------------------------------------------ SPEC's fp32 order, modelled here

uint32_t bits_of(double v) { return mhc::core::float_bits(float(v)); }  // the sign of a zero kept

float rne_to(DType t, float v) {  // the cast to the output dtype, as a float
  uint32_t raw = 0;
  mhc::core::store_element(&raw, t, 0, v);
  return mhc::core::load_element(&raw, t, 0);
}

// Every output of one token computed in SPEC §11's fp32 order (product first, then
// each term added for i ascending; each sum in index order from its first term, as
// the kernels do since 2f899f4 (the two conventions differ only in a -0 result);
// each operation rounded: this file is built with -ffp-contract=off), bitwise.
void check_spec_order(Bag& b, const PCase& c, const std::string& family) {
  const int64_t N = c.N, D = c.D;
  auto f = [](const Tensor& t, int64_t i) { return float(t.get(i)); };
  const Tensor &x = b["x"], &ho = b["h_out"], &hp = b["h_post"], &g = b["grad_out"];
  const DType gxt = b["grad_x"].dtype();
  for (int64_t t = 0; t < c.T(); ++t) {
    auto H = [&](int64_t i, int64_t j) { return float(b["h_res"].get((t * N + i) * N + j)); };
    for (int64_t j = 0; j < N; ++j)
      for (int64_t d = 0; d < D; ++d) {
        float acc;
        if (c.h_res) {
          acc = f(hp, t * N + j) * f(ho, t * D + d);
          for (int64_t i = 0; i < N; ++i) acc = acc + H(i, j) * f(x, (t * N + i) * D + d);
        } else {
          acc = f(x, (t * N + j) * D + d) + f(hp, t * N + j) * f(ho, t * D + d);
        }
        ASSERT_EQ(bits_of(b["out"].get((t * N + j) * D + d)), bits_of(rne_to(c.dtype, acc)))
            << family << " out token " << t << " (" << j << "," << d << ")";
        float gx;
        if (c.h_res) {
          gx = H(j, 0) * f(g, (t * N + 0) * D + d);
          for (int64_t k = 1; k < N; ++k) gx = gx + H(j, k) * f(g, (t * N + k) * D + d);
        } else
          gx = f(g, (t * N + j) * D + d);
        ASSERT_EQ(bits_of(b["grad_x"].get((t * N + j) * D + d)), bits_of(rne_to(gxt, gx))) << family << " grad_x";
      }
    for (int64_t d = 0; d < D; ++d) {
      float acc = f(hp, t * N) * f(g, (t * N) * D + d);
      for (int64_t j = 1; j < N; ++j) acc = acc + f(hp, t * N + j) * f(g, (t * N + j) * D + d);
      ASSERT_EQ(bits_of(b["grad_h_out"].get(t * D + d)), bits_of(rne_to(c.dtype, acc))) << family << " grad_h_out";
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = f(x, (t * N + i) * D) * f(g, (t * N + j) * D);
        for (int64_t d = 1; d < D; ++d) acc = acc + f(x, (t * N + i) * D + d) * f(g, (t * N + j) * D + d);
        ASSERT_EQ(b["grad_h_res"].bits((t * N + i) * N + j), mhc::core::float_bits(acc)) << family << " grad_h_res";
      }
    for (int64_t j = 0; j < N; ++j) {
      float acc = f(ho, t * D) * f(g, (t * N + j) * D);
      for (int64_t d = 1; d < D; ++d) acc = acc + f(ho, t * D + d) * f(g, (t * N + j) * D + d);
      ASSERT_EQ(b["grad_h_post"].bits(t * N + j), mhc::core::float_bits(acc)) << family << " grad_h_post";
    }
  }
}

class PostOracle : public ::testing::TestWithParam<PCase> {};

TEST_P(PostOracle, WithinTheFp32BoundsOfFloat64AndBitwiseSpecOrderOnEveryFamily) {
  const PCase c = GetParam();
  Worst w;
  const std::vector<mhc::Isa> families = available_families();
  Bag want = run_both(c, options_for(families.back()));
  for (mhc::Isa isa : families) {
    SCOPED_TRACE(family_name(isa));
    Bag b = run_both(c, options_for(isa));
    check_against_float64(b, c, w, family_name(isa));
    check_spec_order(b, c, family_name(isa));
    for (const std::string& name : kOutputs)
      EXPECT_EQ(b[name].raw(), want[name].raw()) << name << ": " << family_name(isa) << " vs reference";
  }
  std::string line;
  char buf[96];
  for (const auto& [name, v] : w.over_bound)
    std::snprintf(buf, sizeof buf, " %s %.3g (abs %.3g)", name.c_str(), v, w.abs[name]), line += buf;
  std::printf("[ measured ] %s:%s\n", c.name().c_str(), line.c_str());
}

std::vector<PCase> oracle_cases() {
  std::vector<PCase> out;
  uint64_t seed = 1;
  for (int64_t N : {1, 2, 3, 4, 5, 8, 13})
    for (int64_t D : {1, 15, 17, 64, 300})
      for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
        PCase c;
        c.N = N, c.D = D, c.dtype = dtype, c.S = 3, c.seed = seed++;
        c.h_res = seed % 4 != 0;
        c.grad_x_fp32 = seed % 3 == 0;
        out.push_back(c);
      }
  PCase bsnd = {.B = 2, .S = 7, .bsnd = true, .N = 4, .D = 257, .dtype = DType::bf16, .h_res = true, .grad_x_fp32 = true, .seed = 500};
  out.push_back(bsnd);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Cases, PostOracle, ::testing::ValuesIn(oracle_cases()),
                         [](const ::testing::TestParamInfo<PCase>& i) { return i.param.name(); });

// Zeros of both signs everywhere: the sign of every zero result is the SPEC order's
// (each sum from its first term), on every family.
TEST(PostSpecOrder, SignedZerosFollowTheOrderOnEveryFamily) {
  for (mhc::Isa isa : available_families())
    for (bool h_res : {true, false}) {
      PCase c = {.B = 1, .S = 3, .N = 4, .D = 20, .dtype = DType::bf16, .h_res = h_res, .grad_x_fp32 = true, .seed = 3};
      Bag b = make_bag(c);
      for (const char* name : {"x", "h_out", "grad_out"})
        for (int64_t i = 0; i < b[name].numel(); ++i) b[name].set(i, i % 3 == 0 ? 0.0 : -0.0);
      if (h_res)
        for (int64_t i = 0; i < b["h_res"].numel(); ++i) b["h_res"].set(i, i % 2 ? -0.0 : 0.25);
      ASSERT_TRUE(forward(b, options_for(isa)).ok());
      ASSERT_TRUE(backward(b, options_for(isa)).ok());
      check_spec_order(b, c, family_name(isa) + (h_res ? " h_res" : " identity"));
    }
}

// ------------------------------------------------------------------ H transposed

// N = 3, D = 2, exact small values: out_j = Σ_i H[i, j] x_i (H TRANSPOSED, SPEC §11).
// With the paper's H·x instead, out_0 would be 1·x0 + 2·x1 + 0·x2 = (9, 18), not (129, 258):
// every expectation below differs between the two.
TEST(PostTranspose, HEntersTransposedForwardAndBackward) {
  const float Hm[3][3] = {{1, 2, 0}, {0, 1, 4}, {8, 0, 1}};  // not symmetric
  const float xm[3][2] = {{1, 2}, {4, 8}, {16, 32}};  // sums: integers below 256, exact in bf16
  const float gm[3][2] = {{1, -1}, {3, 0.5f}, {-4, 1}};
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::fp32, DType::bf16}) {
      SCOPED_TRACE(family_name(isa) + " " + dtype_name(dtype));
      PCase c;
      c.S = 1, c.N = 3, c.D = 2, c.dtype = dtype;
      Bag b = make_bag(c);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) b["h_res"].set(i * 3 + j, Hm[i][j]);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t d = 0; d < 2; ++d) b["x"].set(i * 2 + d, xm[i][d]), b["grad_out"].set(i * 2 + d, gm[i][d]);
      for (int64_t j = 0; j < 3; ++j) b["h_post"].set(j, 0.5 * double(j));
      b["h_out"].set(0, 2), b["h_out"].set(1, -2);
      ASSERT_TRUE(forward(b, options_for(isa)).ok());
      ASSERT_TRUE(backward(b, options_for(isa)).ok());
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < 2; ++d) {
          double transposed = 0.5 * double(j) * (d == 0 ? 2 : -2), untransposed = transposed;
          for (int64_t i = 0; i < 3; ++i) transposed += Hm[i][j] * xm[i][d], untransposed += Hm[j][i] * xm[i][d];
          ASSERT_NE(transposed, untransposed);
          EXPECT_EQ(b["out"].get(j * 2 + d), transposed) << "out (" << j << "," << d << ")";
        }
      // Backward of out_j = Σ_i H[i,j] x_i: grad_x_i = Σ_j H[i,j] g_j, grad_H[i,j] = <x_i, g_j>.
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t d = 0; d < 2; ++d) {
          double want = 0, other = 0;
          for (int64_t j = 0; j < 3; ++j) want += Hm[i][j] * gm[j][d], other += Hm[j][i] * gm[j][d];
          ASSERT_NE(want, other);
          EXPECT_EQ(b["grad_x"].get(i * 2 + d), want) << "grad_x (" << i << "," << d << ")";
        }
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          const double want = xm[i][0] * gm[j][0] + xm[i][1] * gm[j][1];
          EXPECT_EQ(b["grad_h_res"].get(i * 3 + j), want) << "grad_h_res (" << i << "," << j << ")";
        }
    }
}

// ------------------------------------------------------------------ variants of the backward

TEST(PostBackward, Fp32GradXIsTheUnroundedSumAndGradHResIsOptional) {
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::bf16, DType::fp16})
      for (bool h_res : {true, false}) {
        SCOPED_TRACE(family_name(isa) + " " + dtype_name(dtype) + (h_res ? " h_res" : " identity"));
        PCase c = {.B = 1, .S = 9, .N = 4, .D = 100, .dtype = dtype, .h_res = h_res, .grad_x_fp32 = false, .seed = 77};
        PCase c32 = c;
        c32.grad_x_fp32 = true;
        Bag a = run_both(c, options_for(isa)), b32 = run_both(c32, options_for(isa));
        for (int64_t i = 0; i < a["grad_x"].numel(); ++i)
          ASSERT_EQ(a["grad_x"].get(i), rne_to(dtype, float(b32["grad_x"].get(i)))) << "element " << i;
        for (const char* name : {"out", "grad_h_res", "grad_h_out", "grad_h_post"}) EXPECT_EQ(a[name].raw(), b32[name].raw()) << name;
        // Without grad_h_res: the other outputs' bits, grad_h_res untouched.
        Bag n = make_bag(c);
        const std::vector<uint8_t> untouched = n["grad_h_res"].buffer.snapshot();
        ASSERT_TRUE(backward(n, options_for(isa), false).ok());
        EXPECT_TRUE(n["grad_h_res"].buffer.snapshot() == untouched);
        for (const char* name : {"grad_x", "grad_h_out", "grad_h_post"}) EXPECT_EQ(n[name].raw(), a[name].raw()) << name;
      }
}

// ------------------------------------------------------------------ determinism and invariance

TEST(PostDeterminism, ThreadCountsGiveTheSameBits) {
  const PCase cases[] = {{.B = 1, .S = 200, .N = 4, .D = 300, .dtype = DType::bf16, .h_res = true, .grad_x_fp32 = true, .seed = 3},
                         {.B = 3, .S = 41, .bsnd = true, .N = 5, .D = 2100, .dtype = DType::fp16, .h_res = true, .seed = 4},
                         {.B = 1, .S = 150, .N = 4, .D = 64, .dtype = DType::fp32, .h_res = false, .seed = 5}};
  for (const PCase& c : cases)
    for (mhc::Isa isa : available_families()) {
      Bag one = run_both(c, options_for(isa, 1));
      for (int threads : {2, 3, 7}) {
        Bag many = run_both(c, options_for(isa, threads));
        for (const std::string& name : kOutputs)
          EXPECT_EQ(many[name].raw(), one[name].raw()) << c.name() << " " << name << " " << family_name(isa) << " threads " << threads;
      }
    }
}

// A token alone, and at positions 0, 12, 13, 100, 199 of a batch of 200 (items of
// 13 tokens at N = 4, D = 300).
TEST(PostDeterminism, ATokenGivesTheSameBitsAloneAndAnywhereInABatch) {
  const PCase batch = {.B = 1, .S = 200, .N = 4, .D = 300, .dtype = DType::bf16, .h_res = true, .seed = 6};
  PCase alone = batch;
  alone.S = 1;
  for (mhc::Isa isa : available_families()) {
    Bag big = run_both(batch, options_for(isa, 2));
    for (int64_t pos : {0, 12, 13, 100, 199}) {
      SCOPED_TRACE(family_name(isa) + " token " + std::to_string(pos));
      Bag one = make_bag(alone);
      for (const char* name : {"x", "h_res", "h_out", "h_post", "grad_out"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) one[name].set(e, big[name].get(pos * per + e));
      }
      ASSERT_TRUE(forward(one, options_for(isa, 2)).ok());
      ASSERT_TRUE(backward(one, options_for(isa, 2)).ok());
      for (const std::string& name : kOutputs) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) ASSERT_EQ(one[name].bits(e), big[name].bits(pos * per + e)) << name;
      }
    }
  }
}

TEST(PostLayouts, BsndAndTndGiveTheSameBits) {
  const PCase bsnd = {.B = 3, .S = 5, .bsnd = true, .N = 4, .D = 70, .dtype = DType::fp16, .h_res = true, .seed = 8};
  PCase tnd = bsnd;
  tnd.bsnd = false;
  for (mhc::Isa isa : available_families()) {
    Bag a = run_both(bsnd, options_for(isa)), b = run_both(tnd, options_for(isa));
    for (const std::string& name : kOutputs) EXPECT_EQ(a[name].raw(), b[name].raw()) << name << " " << family_name(isa);
  }
}

TEST(PostLayouts, StridedAndBroadcastViewsGiveTheContiguousBits) {
  constexpr uint8_t kGap = 0x5a;
  const PCase c = {.B = 2, .S = 9, .bsnd = true, .N = 4, .D = 37, .dtype = DType::bf16, .h_res = true, .grad_x_fp32 = true, .seed = 9};
  Rng rng(10);
  for (mhc::Isa isa : available_families())
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      SCOPED_TRACE(family_name(isa) + " layout " + std::to_string(int(layout)));
      Bag want = run_both(c, options_for(isa));
      Bag b = make_bag(c);
      for (auto& [name, t] : b.t) t = relaid(t, layout, rng, kGap);
      const Bag before = b;
      ASSERT_TRUE(forward(b, options_for(isa)).ok());
      ASSERT_TRUE(backward(b, options_for(isa)).ok());
      for (const std::string& name : kOutputs) {
        EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
        EXPECT_TRUE(gaps_untouched(b[name], kGap)) << name;
      }
      for (const char* name : {"x", "h_res", "h_out", "h_post", "grad_out"})
        EXPECT_TRUE(b[name].buffer.snapshot() == before.t.at(name).buffer.snapshot()) << name << " (an input) changed";
    }
  // h_res and h_post broadcast over tokens (stride 0): each token as with token 0's.
  PCase t1 = c;
  t1.bsnd = false, t1.B = 1, t1.S = 18;
  Bag dense = make_bag(t1);
  Bag bcast = dense;
  for (int64_t t = 0; t < 18; ++t) {
    for (int64_t e = 0; e < 16; ++e) dense["h_res"].set(t * 16 + e, dense["h_res"].get(e));
    for (int64_t e = 0; e < 4; ++e) dense["h_post"].set(t * 4 + e, dense["h_post"].get(e));
  }
  bcast["h_res"].strides[0] = 0;
  bcast["h_post"].strides[0] = 0;
  ASSERT_TRUE(forward(dense, {}).ok() && backward(dense, {}).ok());
  ASSERT_TRUE(forward(bcast, {}).ok() && backward(bcast, {}).ok());
  for (const std::string& name : kOutputs) EXPECT_EQ(bcast[name].raw(), dense[name].raw()) << name << " (broadcast inputs)";
}

TEST(PostEdges, EmptyBatchSucceedsAndWritesNothing) {
  for (bool bsnd : {false, true}) {
    PCase c = {.B = bsnd ? 3 : 1, .S = 0, .bsnd = bsnd, .N = 4, .D = 16, .dtype = DType::bf16, .h_res = true, .seed = 1};
    Bag b = make_bag(c);
    const auto before = b.snapshot();
    for (mhc::Isa isa : available_families()) {
      EXPECT_TRUE(forward(b, options_for(isa)).ok());
      EXPECT_TRUE(backward(b, options_for(isa)).ok());
    }
    EXPECT_TRUE(b.snapshot() == before);
  }
}

// ------------------------------------------------------------------ validation

// Base: x [B,S,N,D] = [2,3,4,8] bf16, h_res [2,3,4,4], h_out [2,3,8], h_post [2,3,4].
const PCase kBase = {.B = 2, .S = 3, .bsnd = true, .N = 4, .D = 8, .dtype = DType::bf16, .h_res = true, .seed = 42};

struct FwdCall {
  Bag bag;
  mhc::PostForwardInputs in;
  mhc::PostForwardOutputs out;
  mhc::Options options;
  static std::unique_ptr<FwdCall> make() {
    auto k = std::make_unique<FwdCall>();
    k->bag = make_bag(kBase);
    k->in = {k->bag["x"].view(), k->bag["h_res"].view(), k->bag["h_out"].view(), k->bag["h_post"].view()};
    k->out = {k->bag["out"].view()};
    return k;
  }
  mhc::Status run() const { return mhc::post_forward(in, out, options); }
  int run_c() const {
    const mhc_options o = to_c(options);
    const CTensor x(in.x), h(in.h_res), ho(in.h_out), hp(in.h_post), y(out.out);
    return mhc_post_forward(x.ptr, h.ptr, ho.ptr, hp.ptr, y.ptr, &o);
  }
};

struct BwdCall {
  Bag bag;
  mhc::PostBackwardInputs in;
  mhc::PostBackwardOutputs out;
  mhc::Options options;
  static std::unique_ptr<BwdCall> make() {
    auto k = std::make_unique<BwdCall>();
    k->bag = make_bag(kBase);
    k->in = {k->bag["grad_out"].view(), k->bag["x"].view(), k->bag["h_res"].view(), k->bag["h_out"].view(),
             k->bag["h_post"].view()};
    k->out = {k->bag["grad_x"].view(), k->bag["grad_h_res"].view(), k->bag["grad_h_out"].view(),
              k->bag["grad_h_post"].view()};
    return k;
  }
  mhc::Status run() const { return mhc::post_backward(in, out, options); }
  int run_c() const {
    const mhc_options o = to_c(options);
    const CTensor g(in.grad_out), x(in.x), h(in.h_res), ho(in.h_out), hp(in.h_post), gx(out.grad_x),
        gh(out.grad_h_res), gho(out.grad_h_out), ghp(out.grad_h_post);
    return mhc_post_backward(g.ptr, x.ptr, h.ptr, ho.ptr, hp.ptr, gx.ptr, gh.ptr, gho.ptr, ghp.ptr, &o);
  }
};

std::vector<LayerRule<FwdCall>> forward_rules() {
  using K = FwdCall;
  return {
      null_rule<K>("x_null_data", [](K& k) { k.in.x.data = nullptr; }, "x: data pointer is null"),
      dtype_rule<K>("x_unknown_dtype", [](K& k) { k.in.x.dtype = DType(9); }, "x: expected dtype bf16, fp16 or fp32, got dtype code 9"),
      shape_rule<K>("x_rank_2", [](K& k) { k.in.x = reshaped(k.in.x, {6, 32}); }, "x: expected [B,S,N,D] or [T,N,D], got [6,32]"),
      shape_rule<K>("x_zero_D", [](K& k) { k.in.x = reshaped(k.in.x, {2, 3, 4, 0}); }, "x: expected N >= 1 and D >= 1 in [B,S,N,D] or [T,N,D], got [2,3,4,0]"),
      layout_rule<K>("x_odd_address", [](K& k) { k.in.x = moved_by_bytes(k.in.x, 1); }, "x: data pointer is not aligned to its element size (2 bytes)"),
      shape_rule<K>("h_res_N_plus_1", [](K& k) { k.in.h_res = k.bag.add(DType::fp32, {2, 3, 4, 5}); }, "h_res: expected [B,S,N,N]=[2,3,4,4], got [2,3,4,5]"),
      shape_rule<K>("h_res_flat", [](K& k) { k.in.h_res = reshaped(*k.in.h_res, {2, 3, 16}); }, "h_res: expected [B,S,N,N]=[2,3,4,4], got [2,3,16]"),
      shape_rule<K>("h_res_other_layout", [](K& k) { k.in.h_res = reshaped(*k.in.h_res, {6, 4, 4}); }, "h_res: expected [B,S,N,N]=[2,3,4,4], got [6,4,4]"),
      dtype_rule<K>("h_res_bf16", [](K& k) { k.in.h_res->dtype = DType::bf16; }, "h_res: expected dtype fp32, got bf16"),
      dtype_rule<K>("h_out_fp16_for_bf16_x", [](K& k) { k.in.h_out.dtype = DType::fp16; }, "h_out: expected dtype bf16 (x's dtype), got fp16"),
      shape_rule<K>("h_out_D_plus_1", [](K& k) { k.in.h_out = k.bag.add(DType::bf16, {2, 3, 9}); }, "h_out: expected [B,S,D]=[2,3,8], got [2,3,9]"),
      shape_rule<K>("h_post_N_plus_1", [](K& k) { k.in.h_post = k.bag.add(DType::fp32, {2, 3, 5}); }, "h_post: expected [B,S,N]=[2,3,4], got [2,3,5]"),
      dtype_rule<K>("h_post_bf16", [](K& k) { k.in.h_post.dtype = DType::bf16; }, "h_post: expected dtype fp32, got bf16"),
      null_rule<K>("out_null_data", [](K& k) { k.out.out.data = nullptr; }, "out: data pointer is null"),
      dtype_rule<K>("out_fp32_for_bf16_x", [](K& k) { k.out.out = k.bag.add(DType::fp32, {2, 3, 4, 8}); }, "out: expected dtype bf16 (x's dtype), got fp32"),
      shape_rule<K>("out_other_layout", [](K& k) { k.out.out = reshaped(k.out.out, {6, 4, 8}); }, "out: expected [B,S,N,D]=[2,3,4,8], got [6,4,8]"),
      layout_rule<K>("out_broadcast", [](K& k) { k.out.out.strides[1] = 0; }, "out: output strides [96,0,8,1] make elements of shape [2,3,4,8] overlap"),
      layout_rule<K>("out_overlaps_x", [](K& k) { k.out.out = k.in.x; }, "out: output memory overlaps input x"),
      layout_rule<K>("out_overlaps_h_out", [](K& k) {
        TensorView pool = k.bag.add(DType::bf16, {2 * 3 * 4 * 8});
        k.out.out = reshaped(pool, {2, 3, 4, 8});
        k.in.h_out = reshaped(pool, {2, 3, 8});
      }, "out: output memory overlaps input h_out"),
      value_rule<K>("num_threads_negative", [](K& k) { k.options.num_threads = -1; }, "num_threads: expected >= 0, got -1"),
  };
}

std::vector<LayerRule<BwdCall>> backward_rules() {
  using K = BwdCall;
  return {
      null_rule<K>("grad_out_null_data", [](K& k) { k.in.grad_out.data = nullptr; }, "grad_out: data pointer is null"),
      dtype_rule<K>("grad_out_fp16", [](K& k) { k.in.grad_out.dtype = DType::fp16; }, "grad_out: expected dtype bf16 (x's dtype), got fp16"),
      shape_rule<K>("grad_out_D_plus_1", [](K& k) { k.in.grad_out = k.bag.add(DType::bf16, {2, 3, 4, 9}); }, "grad_out: expected [B,S,N,D]=[2,3,4,8], got [2,3,4,9]"),
      shape_rule<K>("x_N_differs_from_h_res", [](K& k) { k.in.x = k.bag.add(DType::bf16, {2, 3, 5, 8}); }, "h_res: expected [B,S,N,N]=[2,3,5,5], got [2,3,4,4]"),
      dtype_rule<K>("grad_x_fp16_for_bf16_x", [](K& k) { k.out.grad_x = k.bag.add(DType::fp16, {2, 3, 4, 8}); }, "grad_x: expected dtype bf16 (x's dtype) or fp32, got fp16"),
      shape_rule<K>("grad_x_fp32_wrong_shape", [](K& k) { k.out.grad_x = k.bag.add(DType::fp32, {2, 3, 4, 7}); }, "grad_x: expected [B,S,N,D]=[2,3,4,8], got [2,3,4,7]"),
      shape_rule<K>("grad_h_res_flat", [](K& k) { k.out.grad_h_res = reshaped(*k.out.grad_h_res, {2, 3, 16}); }, "grad_h_res: expected [B,S,N,N]=[2,3,4,4], got [2,3,16]"),
      dtype_rule<K>("grad_h_res_bf16", [](K& k) { k.out.grad_h_res->dtype = DType::bf16; }, "grad_h_res: expected dtype fp32, got bf16"),
      dtype_rule<K>("grad_h_out_fp32", [](K& k) { k.out.grad_h_out = k.bag.add(DType::fp32, {2, 3, 8}); }, "grad_h_out: expected dtype bf16 (x's dtype), got fp32"),
      shape_rule<K>("grad_h_post_other_layout", [](K& k) { k.out.grad_h_post = reshaped(k.out.grad_h_post, {6, 4}); }, "grad_h_post: expected [B,S,N]=[2,3,4], got [6,4]"),
      layout_rule<K>("grad_x_overlaps_grad_out", [](K& k) { k.out.grad_x = k.in.grad_out; }, "grad_x: output memory overlaps input grad_out"),
      layout_rule<K>("grad_h_post_overlaps_grad_h_res", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {96});
        k.out.grad_h_res = reshaped(pool, {2, 3, 4, 4});
        k.out.grad_h_post = reshaped(pool, {2, 3, 4});
      }, "grad_h_post: output memory overlaps output grad_h_res"),
      layout_rule<K>("grad_h_out_overlaps_itself", [](K& k) { k.out.grad_h_out.strides[2] = 0; }, "grad_h_out: output strides [24,8,0] make elements of shape [2,3,8] overlap"),
      value_rule<K>("num_threads_negative", [](K& k) { k.options.num_threads = -1; }, "num_threads: expected >= 0, got -1"),
  };
}

class PostForwardRule : public ::testing::TestWithParam<LayerRule<FwdCall>> {};
TEST_P(PostForwardRule, RejectedWithItsMessageAndNothingWritten) { expect_layer_rejected(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Rules, PostForwardRule, ::testing::ValuesIn(forward_rules()), layer_rule_name<FwdCall>);

class PostBackwardRule : public ::testing::TestWithParam<LayerRule<BwdCall>> {};
TEST_P(PostBackwardRule, RejectedWithItsMessageAndNothingWritten) { expect_layer_rejected(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Rules, PostBackwardRule, ::testing::ValuesIn(backward_rules()), layer_rule_name<BwdCall>);

// ------------------------------------------------------------------ the C face

TEST(PostCApi, NullRequiredPointersAreNamed) {
  auto f = FwdCall::make();
  const auto before = f->bag.snapshot();
  const char* names[] = {"x", "h_out", "h_post", "out"};
  for (int which = 0; which < 4; ++which) {
    mhc_tensor t[4] = {to_c(f->in.x), to_c(f->in.h_out), to_c(f->in.h_post), to_c(f->out.out)};
    const mhc_tensor* p[4];
    for (int i = 0; i < 4; ++i) p[i] = i == which ? nullptr : &t[i];
    const mhc_tensor h = to_c(*f->in.h_res);
    EXPECT_EQ(mhc_post_forward(p[0], &h, p[1], p[2], p[3], nullptr), MHC_ERR_NULLPTR);
    EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required, got NULL");
    EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
  }
  EXPECT_TRUE(f->bag.snapshot() == before);
  auto b = BwdCall::make();
  const auto before_b = b->bag.snapshot();
  const char* bnames[] = {"grad_out", "x", "h_out", "h_post", "grad_x", "grad_h_out", "grad_h_post"};
  for (int which = 0; which < 7; ++which) {
    mhc_tensor t[7] = {to_c(b->in.grad_out), to_c(b->in.x), to_c(b->in.h_out), to_c(b->in.h_post),
                       to_c(b->out.grad_x), to_c(b->out.grad_h_out), to_c(b->out.grad_h_post)};
    const mhc_tensor* p[7];
    for (int i = 0; i < 7; ++i) p[i] = i == which ? nullptr : &t[i];
    const mhc_tensor h = to_c(*b->in.h_res), gh = to_c(*b->out.grad_h_res);
    EXPECT_EQ(mhc_post_backward(p[0], p[1], &h, p[2], p[3], p[4], &gh, p[5], p[6], nullptr), MHC_ERR_NULLPTR);
    EXPECT_EQ(std::string(mhc_last_error()), std::string(bnames[which]) + ": required, got NULL");
  }
  EXPECT_TRUE(b->bag.snapshot() == before_b);
}

TEST(PostCApi, ResultsEqualTheCppFace) {
  for (bool h_res : {true, false}) {
    auto cpp = FwdCall::make(), c = FwdCall::make();
    if (!h_res) cpp->in.h_res.reset(), c->in.h_res.reset();
    ASSERT_TRUE(cpp->run().ok());
    ASSERT_EQ(c->run_c(), MHC_OK) << mhc_last_error();
    EXPECT_EQ(c->bag["out"].raw(), cpp->bag["out"].raw());
    auto bcpp = BwdCall::make(), bc = BwdCall::make();
    if (!h_res) bcpp->in.h_res.reset(), bc->in.h_res.reset(), bcpp->out.grad_h_res.reset(), bc->out.grad_h_res.reset();
    ASSERT_TRUE(bcpp->run().ok());
    ASSERT_EQ(bc->run_c(), MHC_OK) << mhc_last_error();
    for (const char* name : {"grad_x", "grad_h_res", "grad_h_out", "grad_h_post"})
      EXPECT_EQ(bc->bag[name].raw(), bcpp->bag[name].raw()) << name;
  }
}

}  // namespace
}  // namespace mhc_test::layer
