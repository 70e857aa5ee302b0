// MhcPost and MhcPostBackward (SPEC §11) at the edges and on invalid calls, through
// the C++ and the C face:
//   - an empty batch;
//   - every validation rule with its message, nothing written on an error;
//   - the C face: null required pointers named, results equal to the C++ face.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "post_util.hpp"

namespace mhc_test::layer {
namespace {

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
