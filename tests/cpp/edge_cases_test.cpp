// Defined behaviour at every edge (docs/reliability.md):
//   - sizes whose element or byte count overflows 64 bits, or past any memory:
//     a clear error before any allocation or write;
//   - outputs overlapping inputs or each other: an error naming both; the one
//     allowed alias, grad_x exactly grad_x_post, accumulates in place;
//   - NaN and Inf in any input propagate as IEEE arithmetic does (the float64
//     reference has NaN, +Inf, -Inf at the same places), without a hang, and a
//     NaN in one token leaves every other token's per-token outputs unchanged;
//   - data pointers aligned to their element size but not to the vector width
//     give the bits of aligned copies;
//   - on every error path the outputs are bit for bit untouched.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <climits>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "test_util.hpp"
#include "validation_util.hpp"  // to_c

namespace mhc_test {
namespace {

Tensor& member(Operands& o, const std::string& name) {
  for (const TensorMember& m : tensor_members())
    if (name == m.name) return o.*m.member;
  throw std::runtime_error(name);
}

const std::vector<const char*> kForwardOutputs = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre"};
const std::vector<const char*> kBackwardOutputs = {"grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma"};

Config small_config(DType dtype = DType::bf16, FForm form = FForm::square) {
  Config c;
  c.N = 4; c.D = 8; c.B = 1; c.S = 6; c.bsnd = false;
  c.dtype = dtype; c.form = form; c.gamma = true; c.grad_x_post = true; c.caches = true;
  c.seed = 77;
  return c;
}

// Every output buffer's bytes, to show a failed call wrote nothing.
std::vector<std::vector<uint8_t>> output_bytes(const Operands& o, bool forward) {
  std::vector<std::vector<uint8_t>> out;
  for (const char* n : forward ? kForwardOutputs : kBackwardOutputs) {
    const Tensor& t = member(const_cast<Operands&>(o), n);
    if (t.present()) out.push_back(t.buffer.snapshot());
  }
  return out;
}

// A view of `dims` whose every stride is 0: any element count in a few bytes
// (the validation of inputs allows it; outputs may not overlap themselves).
TensorView broadcast(const void* data, DType dtype, std::initializer_list<int64_t> dims) {
  TensorView v(data, dtype, dims);
  for (int i = 0; i < v.rank; ++i) v.strides[i] = 0;
  return v;
}

bool address_sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
  return false;
}

// ================================================================== sizes

// Small real buffers behind broadcast views.
struct Scratch {
  alignas(64) float f32[64] = {};
  alignas(64) uint16_t b16[64] = {};
};

TEST(EdgeSizes, ElementCountOverflowIsRejected) {
  Scratch s;
  Operands o = make_operands(small_config());
  const auto before = output_bytes(o, true);
  mhc::PreForwardInputs in = forward_inputs(o);
  in.x = broadcast(s.b16, DType::bf16, {int64_t(1) << 32, int64_t(1) << 32, 4, 8});
  const mhc::Status st = mhc::pre_forward(in, forward_outputs(o), o.options);
  EXPECT_EQ(st.code(), mhc::StatusCode::invalid_argument);
  EXPECT_EQ(st.kind(), mhc::ErrorKind::layout);
  EXPECT_EQ(st.message(), "x: element count of [4294967296,4294967296,4,8] overflows 64 bits");
  EXPECT_EQ(output_bytes(o, true), before);
}

TEST(EdgeSizes, ByteExtentOverflowIsRejected) {
  Scratch s;
  Operands o = make_operands(small_config());
  const auto before = output_bytes(o, true);
  mhc::PreForwardInputs in = forward_inputs(o);
  // Six tokens 2^62 elements apart: the last byte lies past 2^64.
  in.x = TensorView(s.b16, DType::bf16, {6, 4, 8}, {int64_t(1) << 61, 8, 1});
  const mhc::Status st = mhc::pre_forward(in, forward_outputs(o), o.options);
  EXPECT_EQ(st.kind(), mhc::ErrorKind::layout);
  EXPECT_NE(st.message().find("x: "), std::string::npos);
  EXPECT_NE(st.message().find("overflows"), std::string::npos) << st.message();
  EXPECT_EQ(output_bytes(o, true), before);
}

// Regression (fuzz_pre_forward, tests/fuzz/corpus/fuzz_pre_forward/regress-last-offset-int64-max):
// a largest element offset of exactly INT64_MAX overflowed when one was added.
TEST(EdgeSizes, LargestOffsetOfExactlyInt64MaxIsRejectedWithoutOverflow) {
  Scratch s;
  Operands o = make_operands(small_config());
  const auto before = output_bytes(o, true);
  mhc::PreForwardInputs in = forward_inputs(o);
  in.x = TensorView(s.b16, DType::bf16, {2, 4, 8}, {INT64_MAX - 31, 8, 1});  // last offset INT64_MAX
  const mhc::Status st = mhc::pre_forward(in, forward_outputs(o), o.options);
  EXPECT_EQ(st.kind(), mhc::ErrorKind::layout);
  EXPECT_EQ(st.message(), "x: byte extent overflows the address space");
  EXPECT_EQ(output_bytes(o, true), before);
}

// Regression (fuzz_pre_forward, tests/fuzz/corpus/fuzz_pre_forward/regress-empty-batch-huge-nd):
// an empty batch passes the element-count check whatever N and D are, and N*D
// overflowed (undefined behaviour) before any error.
TEST(EdgeSizes, EmptyBatchWithHugeNAndDIsRejectedWithoutOverflow) {
  Scratch s;
  for (auto dims : {std::vector<int64_t>{0, int64_t(1) << 62, int64_t(1) << 62},
                    std::vector<int64_t>{0, INT64_MAX, INT64_MAX}, std::vector<int64_t>{0, 1, int64_t(1) << 45}}) {
    Operands o = make_operands(small_config());
    const auto before = output_bytes(o, true);
    mhc::PreForwardInputs in = forward_inputs(o);
    in.x = TensorView(s.b16, DType::bf16, {dims[0], dims[1], dims[2]});
    const mhc::Status st = mhc::pre_forward(in, forward_outputs(o), o.options);
    EXPECT_EQ(st.code(), mhc::StatusCode::invalid_argument);
    EXPECT_EQ(st.kind(), mhc::ErrorKind::shape);
    EXPECT_EQ(st.message().rfind("x: expected N*D and T*N*D of at most 2^44 elements", 0), 0u) << st.message();
    EXPECT_EQ(output_bytes(o, true), before);
  }
  // An x with D = 0 (its element count is 0 whatever B and S are) is rejected for D.
  Operands o = make_operands(small_config());
  mhc::PreForwardInputs in = forward_inputs(o);
  in.x = TensorView(s.b16, DType::bf16, {int64_t(1) << 40, int64_t(1) << 20, 4, 0});
  const mhc::Status st = mhc::pre_forward(in, forward_outputs(o), o.options);
  EXPECT_EQ(st.message().rfind("x: expected N >= 1 and D >= 1", 0), 0u) << st.message();
}

TEST(EdgeSizes, OperandsPastTheSizeLimitAreRejected) {
  // K = 2^44 fits the limit, but phi [F=2, K] has 2^45 elements: no machine holds
  // it, and the workspace sized from it would overflow later computations.
  Scratch s;
  const int64_t K = int64_t(1) << 44;
  mhc::PreForwardInputs in{broadcast(s.b16, DType::bf16, {1, 1, K}), broadcast(s.f32, DType::fp32, {2, K}),
                           TensorView(s.f32, DType::fp32, {2}), TensorView(s.f32 + 4, DType::fp32, {2}), std::nullopt};
  std::vector<uint16_t> h_in(16, 0xa5a5);
  std::vector<float> h_post(4, -1.0f);
  mhc::PreForwardOutputs out{TensorView(h_in.data(), DType::bf16, {1, K}), TensorView(h_post.data(), DType::fp32, {1, 1}),
                             std::nullopt, std::nullopt, std::nullopt, std::nullopt};
  const mhc::Status st = mhc::pre_forward(in, out);
  EXPECT_EQ(st.code(), mhc::StatusCode::invalid_argument);
  EXPECT_EQ(st.message().rfind("phi: expected F*K and T*F of at most 2^44 elements", 0), 0u) << st.message();
  EXPECT_EQ(h_in, std::vector<uint16_t>(16, 0xa5a5));
  EXPECT_EQ(h_post, std::vector<float>(4, -1.0f));
  // T*F past the limit: 2^43 tokens of F = 3.
  const int64_t T = int64_t(1) << 43;
  in = {broadcast(s.b16, DType::bf16, {T, 1, 1}), broadcast(s.f32, DType::fp32, {3, 1}),
        TensorView(s.f32, DType::fp32, {3}), TensorView(s.f32, DType::fp32, {3}), std::nullopt};
  out = {TensorView(h_in.data(), DType::bf16, {T, 1}), TensorView(h_post.data(), DType::fp32, {T, 1}),
         TensorView(h_post.data(), DType::fp32, {T, 1}), std::nullopt, std::nullopt, std::nullopt};
  const mhc::Status st2 = mhc::pre_forward(in, out);
  EXPECT_EQ(st2.message().rfind("phi: expected F*K and T*F of at most 2^44 elements", 0), 0u) << st2.message();
}

// A region of address space that faults on any access: an output placed there
// proves that a failed call wrote nothing (the test would die of SIGSEGV).
struct Reserved {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  explicit Reserved(size_t n) : bytes(n) {
    base = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ~Reserved() { if (base != MAP_FAILED) munmap(base, bytes); }
  bool ok() const { return base != MAP_FAILED; }
};

int overcommit_mode() {
  std::ifstream f("/proc/sys/vm/overcommit_memory");
  int mode = 0;
  f >> mode;
  return mode;
}

// 2^40 tokens (N = D = 1, F = 3): every input broadcast, grad_x in 2 TiB of
// address space no page of which is accessible. The backward's workspace
// (T*F floats twice, ~24 TiB; for the reference, the staged copy of the
// broadcast h_mix) cannot be had: a runtime error, nothing written.
TEST(EdgeSizes, WorkspaceBeyondMemoryFailsCleanlyBeforeAnyWrite) {
  if (overcommit_mode() == 1) GTEST_SKIP() << "vm.overcommit_memory=1: a 24 TiB mapping would succeed";
  const int64_t T = int64_t(1) << 40;
  Reserved grad_x(size_t(T) * 2);
  ASSERT_TRUE(grad_x.ok()) << "could not reserve 2 TiB of address space";
  Scratch s;
  s.f32[0] = 1.0f;
  std::vector<float> grad_phi(3, -7.0f), grad_alpha(3, -7.0f), grad_bias(3, -7.0f);
  const mhc::PreBackwardInputs in{broadcast(s.b16, DType::bf16, {T, 1, 1}), broadcast(s.f32, DType::fp32, {3, 1}),
                                  TensorView(s.f32, DType::fp32, {3}), broadcast(s.b16, DType::bf16, {T, 1}),
                                  broadcast(s.f32, DType::fp32, {T, 1}), broadcast(s.f32, DType::fp32, {T, 1, 1}),
                                  broadcast(s.f32, DType::fp32, {T}), broadcast(s.f32, DType::fp32, {T, 3}),
                                  broadcast(s.f32, DType::fp32, {T, 1}), broadcast(s.f32, DType::fp32, {T, 1}),
                                  std::nullopt, std::nullopt};
  const mhc::PreBackwardOutputs out{TensorView(grad_x.base, DType::bf16, {T, 1, 1}),
                                    TensorView(grad_phi.data(), DType::fp32, {3, 1}),
                                    TensorView(grad_alpha.data(), DType::fp32, {3}),
                                    TensorView(grad_bias.data(), DType::fp32, {3}), std::nullopt};
  const mhc::Status st = mhc::pre_backward(in, out);
  EXPECT_EQ(st.code(), mhc::StatusCode::runtime_error) << st.message();
  EXPECT_EQ(st.kind(), mhc::ErrorKind::runtime);
  EXPECT_EQ(st.message().rfind("workspace: could not allocate ", 0), 0u) << st.message();
  EXPECT_EQ(grad_phi, std::vector<float>(3, -7.0f));
  EXPECT_EQ(grad_alpha, std::vector<float>(3, -7.0f));
  EXPECT_EQ(grad_bias, std::vector<float>(3, -7.0f));
  // The C face says the same.
  const mhc_tensor c[] = {to_c(in.x), to_c(in.phi), to_c(in.alpha), to_c(in.grad_h_in), to_c(*in.grad_h_post),
                          to_c(*in.grad_h_res), to_c(in.inv_rms), to_c(in.h_mix), to_c(in.h_pre), to_c(*in.h_post),
                          to_c(out.grad_x), to_c(out.grad_phi), to_c(out.grad_alpha), to_c(out.grad_bias)};
  EXPECT_EQ(mhc_pre_backward(&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8], &c[9], nullptr, nullptr,
                             &c[10], &c[11], &c[12], &c[13], nullptr, nullptr),
            MHC_ERR_RUNTIME);
  EXPECT_EQ(mhc_last_error(), st.message());
  EXPECT_EQ(grad_phi, std::vector<float>(3, -7.0f));
}

// Options::num_threads of INT_MAX with K = 2^40 on the portable family: the
// backward plan's threads x scratch floats must not overflow int64 (the drivers
// clamp the count to runtime::kMaxThreads; ASan+UBSan run this test).
TEST(EdgeSizes, PortablePlanWithAbsurdThreadCountDoesNotOverflow) {
  if (reference_selected() && address_sanitized())
    GTEST_SKIP() << "the float64 reference allocates with new, which ASan turns into a fatal report";
  const int64_t D = int64_t(1) << 40;
  Reserved grad_x(size_t(D) * 2), grad_phi(size_t(D) * 8);
  ASSERT_TRUE(grad_x.ok() && grad_phi.ok());
  Scratch s;
  s.f32[0] = 1.0f;
  std::vector<float> grad_alpha(2, -7.0f), grad_bias(2, -7.0f);
  const mhc::PreBackwardInputs in{broadcast(s.b16, DType::bf16, {1, 1, D}), broadcast(s.f32, DType::fp32, {2, D}),
                                  TensorView(s.f32, DType::fp32, {2}), broadcast(s.b16, DType::bf16, {1, D}),
                                  broadcast(s.f32, DType::fp32, {1, 1}), std::nullopt,
                                  broadcast(s.f32, DType::fp32, {1}), broadcast(s.f32, DType::fp32, {1, 2}),
                                  broadcast(s.f32, DType::fp32, {1, 1}), broadcast(s.f32, DType::fp32, {1, 1}),
                                  std::nullopt, std::nullopt};
  const mhc::PreBackwardOutputs out{TensorView(grad_x.base, DType::bf16, {1, 1, D}),
                                    TensorView(grad_phi.base, DType::fp32, {2, D}),
                                    TensorView(grad_alpha.data(), DType::fp32, {2}),
                                    TensorView(grad_bias.data(), DType::fp32, {2}), std::nullopt};
  mhc::Options options;
  options.num_threads = INT_MAX;
  options.isa = mhc::Isa::portable;
  const mhc::Status st = mhc::pre_backward(in, out, options);
  EXPECT_EQ(st.code(), mhc::StatusCode::runtime_error) << st.message();
  EXPECT_EQ(grad_alpha, std::vector<float>(2, -7.0f));
}

TEST(EdgeSizes, AbsurdThreadCountsRunAndGiveTheBitsOfOneThread) {
  Operands one = make_operands(small_config());
  one.options.num_threads = 1;
  ASSERT_TRUE(run_forward_with_caches(one).ok());
  ASSERT_TRUE(mhc::pre_backward(backward_inputs(one), backward_outputs(one), one.options).ok());
  for (int threads : {1 << 20, INT_MAX}) {
    Operands o = make_operands(small_config());
    o.options.num_threads = threads;
    const mhc::Status f = run_forward_with_caches(o);
    ASSERT_TRUE(f.ok()) << f.message();
    const mhc::Status b = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
    ASSERT_TRUE(b.ok()) << b.message();
    for (const char* n : kForwardOutputs) EXPECT_EQ(member(o, n).raw(), member(one, n).raw()) << n;
    for (const char* n : kBackwardOutputs) EXPECT_EQ(member(o, n).raw(), member(one, n).raw()) << n;
  }
}

// ================================================================== overlap and the one alias

TEST(EdgeAliasing, OutputOverlappingAnInputIsRejectedNamingBoth) {
  Operands o = make_operands(small_config(DType::fp32));
  // bias (24 floats) and h_post (6x4) in one buffer, h_post over bias's last 4 elements.
  Tensor pool = make_tensor(DType::fp32, {64}, kOutputFill);
  std::memcpy(pool.data(), o.bias.data(), 24 * 4);
  mhc::PreForwardInputs in = forward_inputs(o);
  in.bias = TensorView(pool.data(), DType::fp32, {24});
  mhc::PreForwardOutputs out = forward_outputs(o);
  out.h_post = TensorView(static_cast<float*>(pool.data()) + 20, DType::fp32, {6, 4});
  const auto before = pool.buffer.snapshot();
  const auto outputs_before = output_bytes(o, true);
  const mhc::Status st = mhc::pre_forward(in, out, o.options);
  EXPECT_EQ(st.kind(), mhc::ErrorKind::layout);
  EXPECT_EQ(st.message(), "h_post: output memory overlaps input bias");
  EXPECT_EQ(pool.buffer.snapshot(), before);
  EXPECT_EQ(output_bytes(o, true), outputs_before);
}

TEST(EdgeAliasing, OutputsOverlappingEachOtherAreRejectedNamingBoth) {
  Operands o = make_operands(small_config());
  const auto before = output_bytes(o, true);
  Tensor pool = make_tensor(DType::fp32, {64}, kOutputFill);
  mhc::PreForwardOutputs out = forward_outputs(o);
  out.h_post = TensorView(pool.data(), DType::fp32, {6, 4});
  out.h_pre = TensorView(static_cast<float*>(pool.data()) + 4, DType::fp32, {6, 4});
  const auto pool_before = pool.buffer.snapshot();
  const mhc::Status st = mhc::pre_forward(forward_inputs(o), out, o.options);
  EXPECT_EQ(st.message(), "h_pre: output memory overlaps output h_post");
  EXPECT_EQ(output_bytes(o, true), before);
  EXPECT_EQ(pool.buffer.snapshot(), pool_before);
  // An output overlapping itself (stride 0 over tokens).
  out = forward_outputs(o);
  out.h_in.strides[0] = 0;
  const mhc::Status self = mhc::pre_forward(forward_inputs(o), out, o.options);
  EXPECT_EQ(self.kind(), mhc::ErrorKind::layout);
  EXPECT_NE(self.message().find("overlap"), std::string::npos) << self.message();
  EXPECT_EQ(output_bytes(o, true), before);
}

class GradXAlias : public ::testing::TestWithParam<DType> {};

// grad_x exactly grad_x_post (same pointer, dtype, shape, strides) holds
// grad_x_post + the rest afterwards: the bits of separate buffers.
TEST_P(GradXAlias, ExactAliasAccumulatesInPlace) {
  for (bool strided : {false, true}) {
    Config c = small_config(GetParam());
    c.S = 70;  // two backward chunks of tokens
    Operands separate = make_operands(c);
    ASSERT_TRUE(run_forward_with_caches(separate).ok());
    Operands aliased = separate;
    if (strided) {  // a padded layout shared by both views
      Rng rng(5);
      aliased.grad_x_post = relaid(separate.grad_x_post, Layout::padded_rows, rng);
    }
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(separate), backward_outputs(separate), separate.options).ok());
    mhc::PreBackwardOutputs out = backward_outputs(aliased);
    out.grad_x = aliased.grad_x_post.view();
    const mhc::Status st = mhc::pre_backward(backward_inputs(aliased), out, aliased.options);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(aliased.grad_x_post.raw(), separate.grad_x.raw()) << (strided ? "strided" : "contiguous");
    for (const char* n : {"grad_phi", "grad_alpha", "grad_bias", "grad_gamma"})
      EXPECT_EQ(member(aliased, n).raw(), member(separate, n).raw()) << n;
  }
}

TEST_P(GradXAlias, AnyOtherOverlapWithGradXPostIsRejected) {
  Config c = small_config(GetParam());
  Operands o = make_operands(c);
  ASSERT_TRUE(run_forward_with_caches(o).ok());
  const int64_t T = c.T(), N = c.N, D = c.D;
  Tensor pool = make_tensor(GetParam(), {T * N * D + 8});
  const TensorView post(pool.data(), GetParam(), {T, N, D});
  std::vector<TensorView> bad;
  bad.push_back(TensorView(static_cast<uint8_t*>(pool.data()) + element_bytes(GetParam()), GetParam(), {T, N, D}));
  bad.push_back(TensorView(pool.data(), GetParam(), {T, N, D}, {1, T * D, T}));  // same pointer, other strides
  for (const TensorView& gx : bad) {
    mhc::PreBackwardInputs in = backward_inputs(o);
    in.grad_x_post = post;
    mhc::PreBackwardOutputs out = backward_outputs(o);
    out.grad_x = gx;
    const auto before = pool.buffer.snapshot();
    const auto outputs_before = output_bytes(o, false);
    const mhc::Status st = mhc::pre_backward(in, out, o.options);
    EXPECT_EQ(st.message(),
              "grad_x: output memory overlaps input grad_x_post (only an exact alias of grad_x_post is allowed)");
    EXPECT_EQ(pool.buffer.snapshot(), before);
    EXPECT_EQ(output_bytes(o, false), outputs_before);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GradXAlias, ::testing::Values(DType::bf16, DType::fp16, DType::fp32),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// ================================================================== NaN and Inf

enum class Cls { finite, nan, pos_inf, neg_inf };
Cls cls(double v) {
  if (std::isnan(v)) return Cls::nan;
  if (std::isinf(v)) return v > 0 ? Cls::pos_inf : Cls::neg_inf;
  return Cls::finite;
}
const char* cls_name(Cls c) {
  switch (c) {
    case Cls::finite: return "finite";
    case Cls::nan: return "NaN";
    case Cls::pos_inf: return "+Inf";
    case Cls::neg_inf: return "-Inf";
  }
  return "";
}

struct Poison {
  bool forward;
  const char* input;
  double value;
  DType dtype;
};
void PrintTo(const Poison& p, std::ostream* os) {
  *os << (p.forward ? "forward " : "backward ") << p.input << "=" << p.value << " " << dtype_name(p.dtype);
}
std::string poison_name(const ::testing::TestParamInfo<Poison>& info) {
  const Poison& p = info.param;
  const char* v = std::isnan(p.value) ? "nan" : p.value > 0 ? "pinf" : "ninf";
  return std::string(p.forward ? "fwd_" : "bwd_") + p.input + "_" + v + "_" + dtype_name(p.dtype);
}

std::vector<Poison> poisons() {
  std::vector<Poison> out;
  const double values[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY};
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (double v : values) {
      for (const char* in : {"x", "phi", "alpha", "bias", "gamma"}) out.push_back({true, in, v, dtype});
      for (const char* in : {"x", "phi", "alpha", "grad_h_in", "grad_h_post", "grad_h_res", "inv_rms", "h_mix",
                             "h_pre", "h_post", "gamma", "grad_x_post"})
        out.push_back({false, in, v, dtype});
    }
  return out;
}

bool per_token(const std::string& name) {
  return name != "phi" && name != "alpha" && name != "bias" && name != "gamma";
}

class NonFinite : public ::testing::TestWithParam<Poison> {};

// Output `name`'s classes against the float64 reference's, element by element.
void expect_same_classes(const char* name, const Tensor& lib, const std::vector<double>& ref) {
  ASSERT_EQ(size_t(lib.numel()), ref.size()) << name;
  int reported = 0;
  for (int64_t i = 0; i < lib.numel() && reported < 5; ++i)
    if (cls(lib.get(i)) != cls(ref[i])) {
      ADD_FAILURE() << name << "[" << i << "]: library " << lib.get(i) << " (" << cls_name(cls(lib.get(i)))
                    << "), float64 reference " << ref[i] << " (" << cls_name(cls(ref[i])) << ")";
      ++reported;
    }
}

// Every forward (backward) output's classes against the float64 reference's.
void expect_forward_classes(const Operands& o) {
  const mhc::kernels::reference::ForwardOutputs64 ref = mhc::kernels::reference::forward(forward64(o));
  expect_same_classes("h_in", o.h_in, ref.h_in);
  expect_same_classes("h_post", o.h_post, ref.h_post);
  expect_same_classes("h_res", o.h_res, ref.h_res);
  expect_same_classes("inv_rms", o.inv_rms, ref.inv_rms);
  expect_same_classes("h_mix", o.h_mix, ref.h_mix);
  expect_same_classes("h_pre", o.h_pre, ref.h_pre);
}
void expect_backward_classes(const Operands& o) {
  const mhc::kernels::reference::BackwardOutputs64 ref = mhc::kernels::reference::backward(backward64(o));
  expect_same_classes("grad_x", o.grad_x, ref.grad_x);
  expect_same_classes("grad_phi", o.grad_phi, ref.grad_phi);
  expect_same_classes("grad_alpha", o.grad_alpha, ref.grad_alpha);
  expect_same_classes("grad_bias", o.grad_bias, ref.grad_bias);
  expect_same_classes("grad_gamma", o.grad_gamma, ref.grad_gamma);
}

// Bits of token t of a per-token output (contiguous, T tokens).
std::vector<uint32_t> token_bits(const Tensor& t, int64_t token, int64_t tokens) {
  const std::vector<uint32_t> all = t.raw();
  const size_t per = all.size() / size_t(tokens);
  return {all.begin() + long(per * token), all.begin() + long(per * (token + 1))};
}

TEST_P(NonFinite, PropagatesAsIeeeAndStaysInItsToken) {
  const Poison& p = GetParam();
  Config c = small_config(p.dtype);
  const int64_t T = c.T(), poisoned_token = 2;
  Operands clean = make_operands(c);
  ASSERT_TRUE(run_forward_with_caches(clean).ok());
  if (!p.forward) {
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(clean), backward_outputs(clean), clean.options).ok());
  }
  Operands o = clean;
  Tensor& target = member(o, p.input);
  ASSERT_TRUE(target.present());
  const int64_t per = target.numel() / (per_token(p.input) ? T : 1);
  const int64_t element = per_token(p.input) ? poisoned_token * per + per / 2 : per / 3;
  target.set(element, p.value);
  ASSERT_EQ(cls(target.get(element)), cls(p.value));

  if (p.forward) {
    for (const char* n : kForwardOutputs)
      if (member(o, n).present()) std::memset(member(o, n).buffer.bytes(), kOutputFill, member(o, n).buffer.byte_size());
    const mhc::Status st = run_forward_with_caches(o);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_forward_classes(o);
  } else {
    for (const char* n : kBackwardOutputs)
      if (member(o, n).present()) std::memset(member(o, n).buffer.bytes(), kOutputFill, member(o, n).buffer.byte_size());
    const mhc::Status st = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_backward_classes(o);
  }
  // A per-token input poisoned in one token: every other token's per-token outputs keep their bits.
  if (per_token(p.input)) {
    const std::vector<const char*> outputs =
        p.forward ? kForwardOutputs : std::vector<const char*>{"grad_x"};
    for (const char* n : outputs) {
      if (!member(o, n).present()) continue;
      for (int64_t t = 0; t < T; ++t) {
        if (t != poisoned_token) {
          EXPECT_EQ(token_bits(member(o, n), t, T), token_bits(member(clean, n), t, T)) << n << " token " << t;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, NonFinite, ::testing::ValuesIn(poisons()), poison_name);

// The same, with every fp32 operand (phi, gamma, alpha, bias, the caches and the
// fp32 gradients) holding values of 8 significant bits. Kernels that take an fp32
// operand in bf16 parts (the AMX family) then meet parts that are exactly zero,
// and 0 x Inf must not turn the reference's Inf into NaN.
class NonFiniteShortOperands : public ::testing::TestWithParam<Poison> {};

void shorten(Tensor& t) {
  if (!t.present() || t.dtype() != DType::fp32) return;
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set(i, mhc::core::bf16_to_float(mhc::core::float_to_bf16(float(t.get(i)))));
}

TEST_P(NonFiniteShortOperands, PropagateAsIeee) {
  const Poison& p = GetParam();
  // 6 tokens and 40: the AMX family takes calls of up to 16 tokens another way.
  for (int64_t tokens : {6, 40}) {
  SCOPED_TRACE(std::to_string(tokens) + " tokens");
  Config c = small_config(p.dtype);
  c.D = 40;  // a partial 32-column step after the first
  c.S = tokens;
  Operands o = make_operands(c);
  for (const char* n : {"phi", "gamma", "alpha", "bias", "grad_h_post", "grad_h_res"}) shorten(member(o, n));
  if (!p.forward) {
    ASSERT_TRUE(run_forward_with_caches(o).ok());
    for (const char* n : {"inv_rms", "h_mix", "h_pre", "h_post"}) shorten(member(o, n));
  }
  Tensor& target = member(o, p.input);
  const int64_t per = target.numel() / (per_token(p.input) ? c.T() : 1);
  target.set(per_token(p.input) ? 2 * per + per / 2 : per / 3, p.value);
  if (p.forward) {
    ASSERT_TRUE(run_forward_with_caches(o).ok());
    expect_forward_classes(o);
  } else {
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok());
    expect_backward_classes(o);
  }
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, NonFiniteShortOperands, ::testing::ValuesIn(poisons()), poison_name);

// Two ways a kernel that folds gamma into phi or takes operands in bf16 parts on
// tiles could change an output's class: a subnormal bf16 x (tiles flush it to 0)
// times an Inf of phi, and phi*gamma overflowing where SPEC's phi.(v*gamma) does
// not. Both on 6 and on 40 tokens (the AMX family's two forward paths).
TEST(NonFiniteEdges, SubnormalXTimesInfPhiAndPhiGammaOverflow) {
  for (DType dtype : {DType::bf16, DType::fp16})
    for (int64_t tokens : {6, 40})
      for (int which : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(tokens) + " tokens, " +
                     (which == 0 ? "subnormal x times Inf phi" : "phi*gamma overflows"));
        Config c = small_config(dtype);
        c.D = 40;
        c.S = tokens;
        Operands o = make_operands(c);
        const int64_t k = 37, token = 2;  // stream 0, column 37 (the second, partial, step of 32)
        if (which == 0) {
          o.x.set(token * c.N * c.D + k, dtype == DType::bf16 ? 9.18355e-41 : 5.96046e-08);  // the smallest subnormal
          for (int64_t f = 0; f < o.phi.numel() / (c.N * c.D); ++f) o.phi.set(f * c.N * c.D + k, INFINITY);
        } else {
          for (int64_t i = 0; i < o.x.numel(); ++i) o.x.set(i, 1e-3);
          o.phi.set(k, 1e30);
          o.gamma.set(k, 1e10);
        }
        ASSERT_TRUE(run_forward_with_caches(o).ok());
        expect_forward_classes(o);
      }
}

// ================================================================== misaligned pointers

// The same tensor at an element offset from its buffer's start: aligned to its
// element size, not to the 16/32/64 bytes of a vector.
Tensor shifted(const Tensor& src, int64_t elements) {
  if (!src.present()) return {};
  Tensor t = src;
  t.offset = src.offset + elements;
  t.buffer = Buffer(src.dtype(), src.buffer.elements() + elements + 1, kOutputFill);
  std::memcpy(t.buffer.bytes() + elements * element_bytes(src.dtype()), src.buffer.bytes(),
              size_t(src.buffer.elements() * element_bytes(src.dtype())));
  return t;
}

struct AlignCase {
  DType dtype;
  int64_t D;
  int64_t shift;  // elements
};
void PrintTo(const AlignCase& a, std::ostream* os) { *os << dtype_name(a.dtype) << " D=" << a.D << " shift " << a.shift; }

class Misaligned : public ::testing::TestWithParam<AlignCase> {};

TEST_P(Misaligned, GivesTheBitsOfAlignedCopies) {
  const AlignCase& a = GetParam();
  Config c = small_config(a.dtype);
  c.D = a.D;
  c.S = 67;
  Operands aligned = make_operands(c);
  ASSERT_TRUE(run_forward_with_caches(aligned).ok());
  ASSERT_TRUE(mhc::pre_backward(backward_inputs(aligned), backward_outputs(aligned), aligned.options).ok());
  Operands moved = make_operands(c);
  for (const TensorMember& m : tensor_members()) moved.*m.member = shifted(moved.*m.member, a.shift);
  ASSERT_NE(reinterpret_cast<uintptr_t>(moved.x.data()) % 64, 0u);
  const mhc::Status f = run_forward_with_caches(moved);
  ASSERT_TRUE(f.ok()) << f.message();
  const mhc::Status b = mhc::pre_backward(backward_inputs(moved), backward_outputs(moved), moved.options);
  ASSERT_TRUE(b.ok()) << b.message();
  for (const char* n : kForwardOutputs) EXPECT_EQ(member(moved, n).raw(), member(aligned, n).raw()) << n;
  for (const char* n : kBackwardOutputs) EXPECT_EQ(member(moved, n).raw(), member(aligned, n).raw()) << n;
}

std::vector<AlignCase> align_cases() {
  std::vector<AlignCase> out;
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (int64_t D : {8, 37, 64, 257})
      for (int64_t shift : {1, 3}) out.push_back({dtype, D, shift});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Layouts, Misaligned, ::testing::ValuesIn(align_cases()),
                         [](const ::testing::TestParamInfo<AlignCase>& i) {
                           return std::string(dtype_name(i.param.dtype)) + "_D" + std::to_string(i.param.D) +
                                  "_shift" + std::to_string(i.param.shift);
                         });

TEST(EdgeAlignment, BelowTheElementSizeIsRejected) {
  Operands o = make_operands(small_config(DType::fp32));
  const auto before = output_bytes(o, true);
  mhc::PreForwardInputs in = forward_inputs(o);
  in.phi.data = static_cast<uint8_t*>(in.phi.data) + 2;
  const mhc::Status st = mhc::pre_forward(in, forward_outputs(o), o.options);
  EXPECT_EQ(st.kind(), mhc::ErrorKind::layout);
  EXPECT_EQ(st.message(), "phi: data pointer is not aligned to its element size (4 bytes)");
  EXPECT_EQ(output_bytes(o, true), before);
}

// ================================================================== error paths write nothing

// One failing call per kind of error, through the C++ and the C face; every
// output buffer keeps its bytes.
TEST(EdgeErrorPaths, NoOutputByteChangesOnAnyKindOfError) {
  Scratch s;
  struct Failure {
    const char* what;
    std::function<void(mhc::PreBackwardInputs&, mhc::PreBackwardOutputs&, mhc::Options&)> mutate;
    mhc::StatusCode code;
  };
  const std::vector<Failure> failures = {
      {"null", [](auto& in, auto&, auto&) { in.h_mix.data = nullptr; }, mhc::StatusCode::null_pointer},
      {"dtype", [](auto& in, auto&, auto&) { in.h_pre.dtype = DType::bf16; }, mhc::StatusCode::invalid_argument},
      {"shape", [](auto& in, auto&, auto&) { in.grad_h_post->shape[1] = 5; }, mhc::StatusCode::invalid_argument},
      {"negative stride", [](auto& in, auto&, auto&) { in.x.strides[2] = -1; }, mhc::StatusCode::invalid_argument},
      {"hc_eps NaN", [](auto&, auto&, auto& o) { o.hc_eps = NAN; }, mhc::StatusCode::invalid_argument},
      {"overlap", [](auto&, auto& out, auto&) { out.grad_bias = TensorView(out.grad_phi.data, DType::fp32, {24}); },
       mhc::StatusCode::invalid_argument},
      {"size limit", [&](auto& in, auto&, auto&) { in.x = broadcast(s.b16, DType::bf16, {int64_t(1) << 42, 4, 8}); },
       mhc::StatusCode::invalid_argument},
      {"rank", [](auto& in, auto&, auto&) { in.alpha.rank = 9; }, mhc::StatusCode::invalid_argument},
      {"num_threads", [](auto&, auto&, auto& o) { o.num_threads = -1; }, mhc::StatusCode::invalid_argument},
  };
  for (const Failure& f : failures) {
    SCOPED_TRACE(f.what);
    Operands o = make_operands(small_config());
    ASSERT_TRUE(run_forward_with_caches(o).ok());
    mhc::PreBackwardInputs in = backward_inputs(o);
    mhc::PreBackwardOutputs out = backward_outputs(o);
    mhc::Options options = o.options;
    f.mutate(in, out, options);
    const auto before = snapshot_all(all_tensors(o));
    const mhc::Status st = mhc::pre_backward(in, out, options);
    EXPECT_EQ(st.code(), f.code) << st.message();
    EXPECT_FALSE(st.message().empty());
    EXPECT_TRUE(snapshot_all(all_tensors(o)) == before) << "the C++ face wrote on error";
    const mhc_tensor c[] = {to_c(in.x), to_c(in.phi), to_c(in.alpha), to_c(in.grad_h_in), to_c(*in.grad_h_post),
                            to_c(*in.grad_h_res), to_c(in.inv_rms), to_c(in.h_mix), to_c(in.h_pre), to_c(*in.h_post),
                            to_c(*in.gamma), to_c(*in.grad_x_post), to_c(out.grad_x), to_c(out.grad_phi),
                            to_c(out.grad_alpha), to_c(out.grad_bias), to_c(*out.grad_gamma)};
    mhc_options co = mhc_default_options();
    co.norm_eps = options.norm_eps;
    co.hc_eps = options.hc_eps;
    co.num_threads = options.num_threads;
    EXPECT_EQ(mhc_pre_backward(&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8], &c[9], &c[10], &c[11],
                               &c[12], &c[13], &c[14], &c[15], &c[16], &co),
              int(f.code));
    EXPECT_EQ(mhc_last_error(), st.message());
    EXPECT_TRUE(snapshot_all(all_tensors(o)) == before) << "the C face wrote on error";
  }
}

}  // namespace
}  // namespace mhc_test
