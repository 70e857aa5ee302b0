// SPEC §5: bitwise-identical results whatever the thread count; per-token
// outputs independent of the other tokens of the batch; sums over tokens in a
// fixed order that depends on T only.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "suite_cases.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

const std::vector<const char*> kForwardOutputs = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre"};
const std::vector<const char*> kBackwardOutputs = {"grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma"};

Tensor& member(Operands& o, const std::string& name) {
  for (const TensorMember& m : tensor_members())
    if (name == m.name) return o.*m.member;
  throw std::runtime_error(name);
}

// Forward (with caches) then backward at `threads`; every output's raw bits by name.
std::map<std::string, std::vector<uint32_t>> run_at(const Config& c, int threads) {
  Operands o = make_operands(c);
  o.options.num_threads = threads;
  const mhc::Status f = run_forward_with_caches(o);
  EXPECT_TRUE(f.ok()) << f.message();
  const mhc::Status b = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
  EXPECT_TRUE(b.ok()) << b.message();
  std::map<std::string, std::vector<uint32_t>> out;
  for (const char* n : kForwardOutputs) out[n] = member(o, n).raw();
  for (const char* n : kBackwardOutputs) out[n] = member(o, n).raw();
  return out;
}


class ManyWorkItems : public ::testing::TestWithParam<Config> {};

TEST_P(ManyWorkItems, ThreadCountDoesNotChangeAnyBit) {
  const auto one = run_at(GetParam(), 1);
  for (int threads : {2, 7, 0}) {
    const auto many = run_at(GetParam(), threads);
    for (const auto& [name, bits] : one)
      EXPECT_EQ(many.at(name), bits) << name << " with num_threads=" << threads << " differs from 1 thread";
  }
}

TEST_P(ManyWorkItems, RepeatedCallsGiveTheSameBits) {
  const auto first = run_at(GetParam(), 2);
  const auto second = run_at(GetParam(), 2);
  for (const auto& [name, bits] : first) EXPECT_EQ(second.at(name), bits) << name;
}

// The same T tokens as [T,N,D], [1,T,N,D] and [B,S,N,D] (B·S = T): same bits
// everywhere, the sums over tokens included (their order depends on T only).
TEST_P(ManyWorkItems, SumsDependOnTOnlyNotOnTheBatchSplit) {
  Config flat = GetParam();
  flat.bsnd = false; flat.B = 1; flat.S = 300;
  const auto want = run_at(flat, 2);
  for (auto [B, S] : {std::pair{1, 300}, {2, 150}, {3, 100}, {300, 1}}) {
    Config split = flat;
    split.bsnd = true; split.B = B; split.S = S;
    const auto got = run_at(split, 2);
    for (const auto& [name, bits] : want)
      EXPECT_EQ(got.at(name), bits) << name << " as [" << B << "," << S << ",N,D]";
  }
}

INSTANTIATE_TEST_SUITE_P(T300, ManyWorkItems, ::testing::ValuesIn(many_item_configs()),
                         [](const ::testing::TestParamInfo<Config>& info) { return info.param.name(); });

// ---------------------------------------------------------------- batch invariance

// Elements [t·per, (t+1)·per) of a contiguous per-token tensor.
std::vector<uint32_t> token_bits(const Tensor& t, int64_t token, int64_t tokens) {
  const std::vector<uint32_t> all = t.raw();
  const size_t per = all.size() / size_t(tokens);
  return {all.begin() + long(per * token), all.begin() + long(per * (token + 1))};
}

// Copy token `from` of a per-token tensor into token `to` of another.
void copy_token(const Tensor& src, int64_t from, int64_t src_tokens, Tensor& dst, int64_t to, int64_t dst_tokens) {
  const int64_t per = src.numel() / src_tokens;
  ASSERT_EQ(per, dst.numel() / dst_tokens);
  for (int64_t i = 0; i < per; ++i) dst.set(to * per + i, src.get(from * per + i));
}

class BatchInvariance : public ::testing::TestWithParam<Config> {};

TEST_P(BatchInvariance, TokenAloneEqualsTokenInsideABatch) {
  const Config batch_cfg = GetParam();
  const int64_t T = batch_cfg.T();
  Config single_cfg = batch_cfg;
  single_cfg.B = 1; single_cfg.S = 1;
  single_cfg.seed = batch_cfg.seed + 1;  // same phi/alpha/bias/gamma copied below
  const std::vector<const char*> per_token_inputs = {"x", "grad_h_in", "grad_h_post", "grad_h_res", "grad_x_post"};
  for (int64_t position : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), T / 2, T - 1}) {
    if (position >= T) continue;
    SCOPED_TRACE("token position " + std::to_string(position) + " of " + std::to_string(T));
    Operands batch = make_operands(batch_cfg);
    Operands single = make_operands(single_cfg);
    for (const char* shared : {"phi", "alpha", "bias", "gamma"})
      if (member(batch, shared).present()) member(single, shared) = member(batch, shared);
    for (const char* name : per_token_inputs)
      if (member(batch, name).present()) copy_token(member(single, name), 0, 1, member(batch, name), position, T);
    // Different thread counts on the two sides as well.
    batch.options.num_threads = 2;
    single.options.num_threads = 1;
    for (Operands* o : {&batch, &single}) {
      ASSERT_TRUE(run_forward_with_caches(*o).ok());
      ASSERT_TRUE(mhc::pre_backward(backward_inputs(*o), backward_outputs(*o), o->options).ok());
    }
    for (const char* name : {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "grad_x"}) {
      if (!member(batch, name).present()) continue;
      EXPECT_EQ(token_bits(member(batch, name), position, T), token_bits(member(single, name), 0, 1)) << name;
    }
  }
}


INSTANTIATE_TEST_SUITE_P(T37, BatchInvariance, ::testing::ValuesIn(batch_configs()),
                         [](const ::testing::TestParamInfo<Config>& info) { return info.param.name(); });

}  // namespace
}  // namespace mhc_test
