// Non-contiguous tensors (SPEC §4: any non-negative strides): strided inputs
// and outputs give bitwise the results of contiguous ones, and the elements of
// an output buffer between the view's elements stay untouched.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "suite_cases.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

constexpr uint8_t kGapFill = 0x5a;  // bytes of a buffer outside its view

// Results of one forward (with caches) and one backward call, as raw bits.
struct RawResults {
  std::vector<std::vector<uint32_t>> outputs;  // in tensor_members() order, for the output tensors
};

const std::vector<const char*>& output_names() {
  static const std::vector<const char*> names = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre",
                                                  "grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma"};
  return names;
}

Tensor& member(Operands& o, const char* name) {
  for (const TensorMember& m : tensor_members())
    if (std::string(m.name) == name) return o.*m.member;
  throw std::runtime_error(name);
}

bool is_pure_input(const std::string& name) {
  for (const char* n : {"x", "phi", "alpha", "bias", "gamma", "grad_h_in", "grad_h_post", "grad_h_res", "grad_x_post"})
    if (name == n) return true;
  return false;
}

// Forward with caches, then backward on its outputs; the results' raw bits.
RawResults run_both(Operands& o) {
  const mhc::Status f = run_forward_with_caches(o);
  EXPECT_TRUE(f.ok()) << f.message();
  const mhc::Status b = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
  EXPECT_TRUE(b.ok()) << b.message();
  RawResults r;
  for (const char* name : output_names()) r.outputs.push_back(member(o, name).raw());
  return r;
}

// The same operands with every tensor in a layout chosen by `pick`.
Operands relaid_operands(const Operands& src, const std::function<Layout()>& pick, Rng& rng) {
  Operands o = src;
  for (const TensorMember& m : tensor_members()) o.*m.member = relaid(src.*m.member, pick(), rng, kGapFill);
  return o;
}

void expect_same_results_and_untouched_gaps(const Config& c, const std::function<Layout()>& pick, Rng& rng) {
  Operands contiguous = make_operands(c);
  const Operands pristine = contiguous;
  const RawResults want = run_both(contiguous);
  Operands strided = relaid_operands(pristine, pick, rng);
  std::string layouts;
  for (const TensorMember& m : tensor_members()) {
    const Tensor& t = strided.*m.member;
    if (!t.present()) continue;
    layouts += std::string(" ") + m.name + "[";
    for (size_t i = 0; i < t.strides.size(); ++i) layouts += (i ? "," : "") + std::to_string(t.strides[i]);
    layouts += "]+" + std::to_string(t.offset);
  }
  SCOPED_TRACE("strides:" + layouts);
  const RawResults got = run_both(strided);
  for (size_t i = 0; i < output_names().size(); ++i)
    EXPECT_EQ(got.outputs[i], want.outputs[i]) << output_names()[i] << " differs from the contiguous run";
  for (const TensorMember& m : tensor_members()) {
    const Tensor& t = strided.*m.member;
    if (!t.present()) continue;
    EXPECT_TRUE(gaps_untouched(t, kGapFill)) << m.name;
    if (is_pure_input(m.name)) {
      EXPECT_EQ(t.raw(), (pristine.*m.member).raw()) << "input " << m.name << " was written";
    }
  }
}


class StridedViews : public ::testing::TestWithParam<Config> {};

TEST_P(StridedViews, EveryOtherElement) {
  Rng rng(GetParam().seed);
  expect_same_results_and_untouched_gaps(GetParam(), [] { return Layout::every_other; }, rng);
}

TEST_P(StridedViews, PaddedRows) {
  Rng rng(GetParam().seed + 1);
  expect_same_results_and_untouched_gaps(GetParam(), [] { return Layout::padded_rows; }, rng);
}

TEST_P(StridedViews, PermutedDimsOfABiggerBuffer) {
  Rng rng(GetParam().seed + 2);
  expect_same_results_and_untouched_gaps(GetParam(), [] { return Layout::permuted; }, rng);
}

TEST_P(StridedViews, MixedLayoutsPerTensor) {
  Rng rng(GetParam().seed + 3);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    expect_same_results_and_untouched_gaps(
        GetParam(), [&] { return Layout(rng.below(4)); }, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, StridedViews, ::testing::ValuesIn(strided_configs()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return std::to_string(info.index) + "_" + info.param.name();
                         });

// Inputs may overlap themselves (zero strides broadcast): x and grad_h_in with a
// zero batch stride read as the materialised copies would.
TEST(StridedInputs, ZeroStridesBroadcast) {
  Config c;
  c.N = 3; c.D = 6; c.B = 3; c.S = 4; c.bsnd = true; c.dtype = DType::bf16; c.grad_x_post = true;
  Operands materialised = make_operands(c);
  // Make every batch a copy of batch 0.
  for (Tensor* t : {&materialised.x, &materialised.grad_h_in, &materialised.grad_h_post, &materialised.grad_x_post}) {
    const int64_t per_batch = t->numel() / c.B;
    for (int64_t b = 1; b < c.B; ++b)
      for (int64_t i = 0; i < per_batch; ++i) t->set(b * per_batch + i, t->get(i));
  }
  Operands broadcast = materialised;
  for (Tensor* t : {&broadcast.x, &broadcast.grad_h_in, &broadcast.grad_h_post, &broadcast.grad_x_post})
    t->strides[0] = 0;
  const RawResults want = run_both(materialised);
  // The backward's caches are per token outputs of the forward: give the broadcast
  // run its own (contiguous) ones, they come out equal per batch anyway.
  const RawResults got = run_both(broadcast);
  for (size_t i = 0; i < output_names().size(); ++i)
    EXPECT_EQ(got.outputs[i], want.outputs[i]) << output_names()[i];
}

// The stride of an extent-1 dim is never used: any value, even negative, is accepted.
TEST(StridedInputs, ExtentOneDimsIgnoreTheirStrides) {
  Config c;
  c.N = 4; c.D = 8; c.B = 1; c.S = 1; c.bsnd = true; c.dtype = DType::fp16; c.grad_x_post = true;
  Operands plain = make_operands(c);
  Operands odd = plain;
  for (const TensorMember& m : tensor_members()) {
    Tensor& t = odd.*m.member;
    for (size_t i = 0; i < t.shape.size(); ++i)
      if (t.shape[i] == 1) t.strides[i] = i % 2 ? -7 : 1000003;
  }
  const RawResults want = run_both(plain);
  const RawResults got = run_both(odd);
  for (size_t i = 0; i < output_names().size(); ++i)
    EXPECT_EQ(got.outputs[i], want.outputs[i]) << output_names()[i];
}

// In-place backward through strided views: grad_x aliasing grad_x_post exactly.
TEST(StridedViews, InPlaceGradXThroughStrides) {
  Config c;
  c.N = 4; c.D = 12; c.B = 2; c.S = 5; c.bsnd = true; c.dtype = DType::bf16; c.grad_x_post = true;
  Operands o = make_operands(c);
  Rng rng(9);
  o.grad_x_post = relaid(o.grad_x_post, Layout::permuted, rng, kGapFill);
  ASSERT_TRUE(run_forward_with_caches(o).ok());
  Operands separate = o;
  separate.grad_x = relaid(o.grad_x, Layout::padded_rows, rng, kGapFill);
  ASSERT_TRUE(mhc::pre_backward(backward_inputs(separate), backward_outputs(separate), separate.options).ok());
  mhc::PreBackwardOutputs out = backward_outputs(o);
  out.grad_x = o.grad_x_post.view();  // same pointer, same strides
  const mhc::Status st = mhc::pre_backward(backward_inputs(o), out, o.options);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(o.grad_x_post.raw(), separate.grad_x.raw());
  EXPECT_TRUE(gaps_untouched(o.grad_x_post, kGapFill));
  EXPECT_EQ(o.grad_phi.raw(), separate.grad_phi.raw());
}

}  // namespace
}  // namespace mhc_test
