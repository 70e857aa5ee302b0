// Every output of MhcPre and MhcPreBackward on fixed seeded cases, hashed, per
// kernel family, against pinned hashes (bitwise_hashes.txt): a change of any
// kernel's arithmetic or of the order of its sums shows here as a changed hash.
// The cases are those of the oracle, determinism and strided-view suites, plus
// non-finite inputs. A change meant to alter bits re-records the file with
// MHC_RECORD_HASHES=<path> and says why in its commit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <cstring>
#include <set>
#include <sstream>
#include <string>

#if defined(__aarch64__)
#include <sys/prctl.h>
#endif

#include "suite_cases.hpp"
#include "test_util.hpp"

#ifndef MHC_BITWISE_HASHES
#error "MHC_BITWISE_HASHES must name the pinned hash file"
#endif

namespace mhc_test {
namespace {

struct Case {
  std::string name;
  Operands operands;
};

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// NaN as one pattern per dtype: which NaN an operation returns (its sign, its
// payload) depends on the order of its operands, which compilers may swap; SPEC
// asks only that NaN stays NaN.
uint32_t canonical_nan(DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::fp32: return (bits & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : bits;
    case DType::bf16: return (bits & 0x7fffu) > 0x7f80u ? 0x7fc0u : bits;
    case DType::fp16: return (bits & 0x7fffu) > 0x7c00u ? 0x7e00u : bits;
  }
  return bits;
}

// The hash of every output of a forward (with caches) and a backward on its results.
uint64_t outputs_hash(Operands o, const mhc::Options& options) {
  o.options.num_threads = options.num_threads;
  o.options.isa = options.isa;
  const mhc::Status f = run_forward_with_caches(o);
  EXPECT_TRUE(f.ok()) << f.message();
  const mhc::Status b = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
  EXPECT_TRUE(b.ok()) << b.message();
  uint64_t h = 0xcbf29ce484222325ull;
  for (const TensorMember& m : tensor_members()) {
    const Tensor& t = o.*m.member;
    h = fnv1a(h, m.name, std::strlen(m.name));
    std::vector<uint32_t> bits = t.raw();
    for (uint32_t& b : bits) b = canonical_nan(t.dtype(), b);
    h = fnv1a(h, bits.data(), bits.size() * sizeof(uint32_t));
  }
  return h;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](const std::string& suite, size_t i, const Config& c, Operands o) {
    out.push_back({suite + std::to_string(i) + "_" + c.name() + "_seed" + std::to_string(c.seed), std::move(o)});
  };
  const std::vector<Config> oracle = oracle_configs(), many = many_item_configs(), batch = batch_configs();
  for (size_t i = 0; i < oracle.size(); ++i) add("oracle", i, oracle[i], make_operands(oracle[i]));
  for (size_t i = 0; i < many.size(); ++i) add("many_items", i, many[i], make_operands(many[i]));
  for (size_t i = 0; i < batch.size(); ++i) add("batch", i, batch[i], make_operands(batch[i]));
  const std::vector<Config> strided = strided_configs();
  for (size_t i = 0; i < strided.size(); ++i)
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      Rng rng(strided[i].seed + 7 * int(layout));
      Operands o = make_operands(strided[i]);
      for (const TensorMember& m : tensor_members()) o.*m.member = relaid(o.*m.member, layout, rng);
      add("strided" + std::to_string(int(layout)) + "_", i, strided[i], std::move(o));
    }
  // Non-finite inputs: an Inf in one token of x, a NaN in phi, a subnormal x
  // times an Inf of phi (the AMX family redoes such sums one product at a time).
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    Config c;
    c.N = 4; c.D = 96; c.S = 40; c.dtype = dtype; c.grad_x_post = true; c.seed = 1234 + int(dtype);
    Operands inf_x = make_operands(c);
    inf_x.x.set(3 * c.K() + 5, INFINITY);
    add("inf_x_", 0, c, inf_x);
    Operands nan_phi = make_operands(c);
    nan_phi.phi.set(7, NAN);
    add("nan_phi_", 0, c, nan_phi);
    Operands subnormal = make_operands(c);
    subnormal.x.set(11, dtype == DType::fp16 ? 1e-7 : 1e-39);
    subnormal.phi.set(11, INFINITY);
    add("subnormal_x_inf_phi_", 0, c, subnormal);
  }
  return out;
}

// The key of a family's pinned hashes: its name, and for SVE's families the vector
// length in bits as well ("sve/256"): their lane sums follow the lanes, so their bits do.
std::string hash_key(mhc::Isa isa) {
  std::string key = mhc::isa_name(isa);
#if defined(__aarch64__)
  if (isa == mhc::Isa::sve || isa == mhc::Isa::sve2)
    key += "/" + std::to_string(8 * (prctl(PR_SVE_GET_VL) & PR_SVE_VL_LEN_MASK));
#endif
  return key;
}

// The pinned hashes of every key in the file: key -> case -> hash.
std::map<std::string, std::map<std::string, uint64_t>> pinned_file() {
  std::map<std::string, std::map<std::string, uint64_t>> out;
  std::ifstream in(MHC_BITWISE_HASHES);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, name, hex;
    if (fields >> key >> name >> hex) out[key][name] = std::stoull(hex, nullptr, 16);
  }
  return out;
}

TEST(BitwiseIdentity, EveryOutputOfEveryCaseMatchesItsPinnedHash) {
  const std::vector<Case> all = cases();
  const char* record = std::getenv("MHC_RECORD_HASHES");
  std::ofstream recorded;
  if (record != nullptr) recorded.open(record, std::ios::trunc);
  const auto file = pinned_file();
  // Every family this CPU runs (or the one MHC_ISA names), in this process through Options::isa.
  const std::vector<mhc::Isa> families = families_under_test();
  std::set<std::string> run;
  for (mhc::Isa isa : families) run.insert(hash_key(isa));
  for (const auto& [key, hashes] : file)
    if (run.count(key) == 0)
      std::printf("bitwise identity: %s is pinned but not run here: not checked\n", key.c_str());
  for (mhc::Isa isa : families) {
    const std::string family = hash_key(isa);
    SCOPED_TRACE("kernel family " + family);
    mhc::Options options;
    options.num_threads = 2;
    options.isa = isa;
    const auto found = file.find(family);
    const std::map<std::string, uint64_t> pinned = found != file.end() ? found->second : std::map<std::string, uint64_t>{};
    if (record == nullptr && pinned.size() != all.size()) {  // the other families are still checked
      ADD_FAILURE() << "pinned hashes of " << family << " in " << MHC_BITWISE_HASHES << ": " << pinned.size()
                    << " for " << all.size() << " cases";
      continue;
    }
    for (const Case& c : all) {
      const uint64_t h = outputs_hash(c.operands, options);
      if (record != nullptr) {
        recorded << family << ' ' << c.name << ' ' << std::hex << h << std::dec << '\n';
        continue;
      }
      const auto it = pinned.find(c.name);
      ASSERT_NE(it, pinned.end()) << c.name << " has no pinned hash";
      EXPECT_EQ(it->second, h) << c.name << ": outputs differ from the pinned bits";
    }
  }
}

}  // namespace
}  // namespace mhc_test
