// The aclnn face of the layer operators (SPEC §10-§12, docs/aclnn.md):
// aclnnMhcSinkhorn, aclnnMhcSinkhornBackward, aclnnMhcPost,
// aclnnMhcPostBackward, aclnnMhcPreSinkhorn, aclnnMhcPreSinkhornBackward.
// One table of calls, each described as named tensor slots (CANN's parameter
// names) and one expected outcome: rejected with a code and a message (every
// documented code, and pairs of faults where CANN's order decides which one
// wins), accepted with nothing to run (CANN's empty cases), or computed, when
// every output must equal the C++ API's on the same inputs bit for bit and
// every output the face must not write (caches not asked for, gaps between
// strided elements) must be untouched. Then the executor's lifecycle.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_post.h"
#include "aclnnop/aclnn_mhc_post_backward.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "core/dtype.hpp"  // inputs rounded to fp16 as the library rounds (any compiler)
#include "mhc/mhc.hpp"
#include "op_case.hpp"     // Slot, kPattern, the result sentinels, reset_recent_error

namespace aclnn_layer_test {
namespace {

using aclnn_test::kExecutorSentinel;
using aclnn_test::kPattern;
using aclnn_test::kWorkspaceSentinel;
using aclnn_test::reset_recent_error;
using aclnn_test::Slot;

enum class Op { sinkhorn, sinkhorn_backward, post, post_backward, pre_sinkhorn, pre_sinkhorn_backward };

const char* op_name(Op op) {
  switch (op) {
    case Op::sinkhorn: return "aclnnMhcSinkhorn";
    case Op::sinkhorn_backward: return "aclnnMhcSinkhornBackward";
    case Op::post: return "aclnnMhcPost";
    case Op::post_backward: return "aclnnMhcPostBackward";
    case Op::pre_sinkhorn: return "aclnnMhcPreSinkhorn";
    case Op::pre_sinkhorn_backward: return "aclnnMhcPreSinkhornBackward";
  }
  return "";
}
const Op kOps[] = {Op::sinkhorn, Op::sinkhorn_backward, Op::post, Op::post_backward, Op::pre_sinkhorn,
                   Op::pre_sinkhorn_backward};

struct Config {
  std::vector<int64_t> lead = {5};  // the token dims: {T} or {B, S}
  int64_t N = 4, D = 8, I = 3;      // I: the Sinkhorn's iterations
  aclDataType x_dtype = ACL_BF16;
  bool optional = true;  // sinkhorn: the caches; post (backward): hRes; pre sinkhorn: needBackward
};

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}
int64_t pitch_of(int64_t N) { return (N + 7) / 8 * 8; }  // Na (SPEC §10)
std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Slot make_slot(const std::string& name, aclDataType dtype, std::vector<int64_t> dims, bool output, bool present = true,
               float center = 0.0f, float scale = 1.0f) {
  Slot s;
  s.name = name;
  s.dtype = dtype;
  s.dims = std::move(dims);
  s.output = output;
  s.present = present;
  s.center = center;
  s.scale = scale;
  return s;
}

// Values in [-1, 1] from a name's seed and an element index: a slot holds the
// same numbers whatever its layout and whatever the other slots.
float unit_value(uint32_t seed, int64_t i) {
  uint32_t h = uint32_t(i) * 2654435761u ^ (seed * 40503u + 0x9E3779B9u);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return float(h % 2001u) / 1000.0f - 1.0f;
}
uint32_t seed_of(const std::string& name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

size_t element_size(aclDataType dtype) {
  Slot s;
  s.dtype = dtype;
  return s.element_size();
}

void store(aclDataType dtype, uint8_t* dst, float value) {
  switch (dtype) {
    case ACL_FLOAT: std::memcpy(dst, &value, 4); break;
    case ACL_BF16: {
      uint32_t u;
      std::memcpy(&u, &value, 4);
      u += 0x7fffu + ((u >> 16) & 1u);
      const uint16_t h = uint16_t(u >> 16);
      std::memcpy(dst, &h, 2);
      break;
    }
    case ACL_FLOAT16: {
      const uint16_t h = mhc::core::float_to_fp16(value);
      std::memcpy(dst, &h, 2);
      break;
    }
    default: break;  // dtypes the operators reject: the content does not matter
  }
}

std::vector<uint8_t> random_bytes(const std::string& seed_name, aclDataType dtype, int64_t count, float center,
                                  float scale) {
  const size_t es = element_size(dtype);
  std::vector<uint8_t> out(size_t(count) * es, 0);
  const uint32_t seed = seed_of(seed_name);
  for (int64_t i = 0; i < count; ++i) store(dtype, out.data() + i * es, center + scale * unit_value(seed, i));
  return out;
}

mhc::DType mhc_dtype(aclDataType dtype) {
  return dtype == ACL_BF16 ? mhc::DType::bf16 : dtype == ACL_FLOAT16 ? mhc::DType::fp16 : mhc::DType::fp32;
}

// A contiguous C++ API view of `dims` over `bytes`.
mhc::TensorView view_of(std::vector<uint8_t>& bytes, aclDataType dtype, const std::vector<int64_t>& dims) {
  mhc::TensorView v;
  v.data = bytes.data();
  v.dtype = mhc_dtype(dtype);
  v.rank = int32_t(dims.size());
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = dims[i];
    v.strides[i] = stride;
    stride *= dims[i];
  }
  return v;
}

class LayerCase {
 public:
  LayerCase(Op op, Config c) : op_(op), config_(c) {
    const int64_t N = c.N, D = c.D, F = 2 * N + N * N, K = N * D, Na = pitch_of(N);
    const aclDataType xt = c.x_dtype;
    auto token = [&](std::vector<int64_t> inner) { return concat(c.lead, inner); };
    auto step = [&](std::vector<int64_t> inner) { return concat(concat({2 * c.I}, c.lead), inner); };
    auto& s = slots_;
    switch (op) {
      case Op::sinkhorn:
        s.push_back(make_slot("x", ACL_FLOAT, token({N, N}), false, true, 0.0f, 2.0f));
        s.push_back(make_slot("output", ACL_FLOAT, token({N, N}), true));
        s.push_back(make_slot("normOut", ACL_FLOAT, step({N, Na}), true, c.optional));
        s.push_back(make_slot("sumOut", ACL_FLOAT, step({Na}), true, c.optional));
        break;
      case Op::sinkhorn_backward:
        s.push_back(make_slot("gradOutput", ACL_FLOAT, token({N, N}), false));
        s.push_back(make_slot("normOut", ACL_FLOAT, step({N, Na}), false, true, 0.25f, 0.2f));
        s.push_back(make_slot("sumOut", ACL_FLOAT, step({Na}), false, true, 1.0f, 0.5f));
        s.push_back(make_slot("out", ACL_FLOAT, token({N, N}), true));
        break;
      case Op::post:
        s.push_back(make_slot("x", xt, token({N, D}), false));
        s.push_back(make_slot("hRes", ACL_FLOAT, token({N, N}), false, c.optional, 0.25f, 0.25f));
        s.push_back(make_slot("hOut", xt, token({D}), false));
        s.push_back(make_slot("hPost", ACL_FLOAT, token({N}), false, true, 1.0f, 0.8f));
        s.push_back(make_slot("out", xt, token({N, D}), true));
        break;
      case Op::post_backward:
        s.push_back(make_slot("gradOutput", xt, token({N, D}), false));
        s.push_back(make_slot("x", xt, token({N, D}), false));
        s.push_back(make_slot("hRes", ACL_FLOAT, token({N, N}), false, c.optional, 0.25f, 0.25f));
        s.push_back(make_slot("hOut", xt, token({D}), false));
        s.push_back(make_slot("hPost", ACL_FLOAT, token({N}), false, true, 1.0f, 0.8f));
        s.push_back(make_slot("gradX", xt, token({N, D}), true));
        s.push_back(make_slot("gradHRes", ACL_FLOAT, token({N, N}), true));
        s.push_back(make_slot("gradHOut", xt, token({D}), true));
        s.push_back(make_slot("gradHPost", ACL_FLOAT, token({N}), true));
        break;
      case Op::pre_sinkhorn:
        s.push_back(make_slot("x", xt, token({N, D}), false));
        s.push_back(make_slot("phi", ACL_FLOAT, {F, K}, false, true, 0.0f, 0.05f));
        s.push_back(make_slot("alpha", ACL_FLOAT, {3}, false, true, 1.0f, 0.3f));
        s.push_back(make_slot("bias", ACL_FLOAT, {F}, false, true, 0.0f, 0.1f));
        s.push_back(make_slot("hIn", xt, token({D}), true));
        s.push_back(make_slot("hPost", ACL_FLOAT, token({N}), true));
        s.push_back(make_slot("hRes", ACL_FLOAT, token({N * N}), true));
        s.push_back(make_slot("hPre", ACL_FLOAT, token({N}), true, c.optional));
        s.push_back(make_slot("hcBeforeNorm", ACL_FLOAT, token({F}), true, c.optional));
        s.push_back(make_slot("invRms", ACL_FLOAT, token({1}), true, c.optional));
        s.push_back(make_slot("sumOut", ACL_FLOAT, step({N}), true, c.optional));
        s.push_back(make_slot("normOut", ACL_FLOAT, step({N, N}), true, c.optional));
        break;
      case Op::pre_sinkhorn_backward:
        s.push_back(make_slot("gradHin", xt, token({D}), false));
        s.push_back(make_slot("gradHPost", ACL_FLOAT, token({N}), false));
        s.push_back(make_slot("gradHRes", ACL_FLOAT, token({N * N}), false));
        s.push_back(make_slot("x", xt, token({N, D}), false));
        s.push_back(make_slot("phi", ACL_FLOAT, {F, K}, false, true, 0.0f, 0.05f));
        s.push_back(make_slot("alpha", ACL_FLOAT, {3}, false, true, 1.0f, 0.3f));
        s.push_back(make_slot("bias", ACL_FLOAT, {F}, false, true, 0.0f, 0.1f));
        // The forward's caches: the C++ API's forward on x, phi, alpha, bias (fill_caches).
        s.push_back(make_slot("hPre", ACL_FLOAT, token({N}), false, true, 0.5f, 0.4f));
        s.push_back(make_slot("hcBeforeNorm", ACL_FLOAT, token({F}), false, true, 0.0f, 0.5f));
        s.push_back(make_slot("invRms", ACL_FLOAT, token({1}), false, true, 0.8f, 0.1f));
        s.push_back(make_slot("sumOut", ACL_FLOAT, step({N}), false, true, 1.0f, 0.5f));
        s.push_back(make_slot("normOut", ACL_FLOAT, step({N, N}), false, true, 0.25f, 0.2f));
        s.push_back(make_slot("gradX", xt, token({N, D}), true));
        s.push_back(make_slot("gradPhi", ACL_FLOAT, {F, K}, true));
        s.push_back(make_slot("gradAlpha", ACL_FLOAT, {3}, true));
        s.push_back(make_slot("gradBias", ACL_FLOAT, {F}, true));
        break;
    }
    num_iters = c.I;
    hc_mult = c.N;
    need_backward = c.optional;
  }
  ~LayerCase() {
    destroy_tensors();
    if (executor != kExecutorSentinel) (void)aclDestroyAclOpExecutor(executor);  // may have run: ignored
  }
  LayerCase(const LayerCase&) = delete;
  LayerCase& operator=(const LayerCase&) = delete;

  Op op() const { return op_; }
  const Config& config() const { return config_; }
  std::vector<Slot>& slots() { return slots_; }
  Slot& slot(const std::string& name) {
    for (Slot& s : slots_)
      if (s.name == name) return s;
    throw std::invalid_argument("no slot " + name);
  }
  const Slot& slot(const std::string& name) const { return const_cast<LayerCase*>(this)->slot(name); }

  // Storage and aclTensors from the slots: inputs get deterministic values,
  // a backward's caches the C++ API forward's, outputs and gaps kPattern.
  void materialize() {
    destroy_tensors();
    for (Slot& s : slots_) {
      if (!s.present) continue;
      s.storage.assign(size_t(s.storage_elements()) * s.element_size(), kPattern);
      if (!s.output) write_logical(s, random_bytes(s.name, s.dtype, s.numel(), s.center, s.scale));
    }
    fill_caches();
    for (Slot& s : slots_) {
      if (!s.present) continue;
      const std::vector<int64_t> strides = s.effective_strides();
      const int64_t storage_dims[1] = {s.storage_elements() + s.declared_storage_delta};
      s.tensor = aclCreateTensor(s.dims.data(), s.dims.size(), s.dtype, strides.data(), s.offset, s.format,
                                 storage_dims, 1, s.null_data ? nullptr : s.storage.data());
      if (s.tensor == nullptr) throw std::runtime_error("aclCreateTensor failed for " + s.name);
    }
  }
  void destroy_tensors() {
    for (Slot& s : slots_) {
      if (s.tensor != nullptr) (void)aclDestroyTensor(s.tensor);
      s.tensor = nullptr;
    }
  }
  // Replaces the aclTensor of `name` by one over the storage of `other` (overlap).
  void alias(const std::string& name, const std::string& other) {
    Slot& s = slot(name);
    Slot& o = slot(other);
    (void)aclDestroyTensor(s.tensor);
    const std::vector<int64_t> strides = s.effective_strides();
    s.tensor = aclCreateTensor(s.dims.data(), s.dims.size(), s.dtype, strides.data(), 0, s.format, nullptr, 0,
                               o.storage.data());
  }

  aclnnStatus get_workspace(bool null_workspace_size = false, bool null_executor = false) {
    uint64_t* ws = null_workspace_size ? nullptr : &workspace_size;
    aclOpExecutor** ex = null_executor ? nullptr : &executor;
    auto t = [this](const char* name) { return slot(name).tensor; };
    switch (op_) {
      case Op::sinkhorn:
        return aclnnMhcSinkhornGetWorkspaceSize(t("x"), eps, num_iters, t("output"), t("normOut"), t("sumOut"), ws,
                                                ex);
      case Op::sinkhorn_backward:
        return aclnnMhcSinkhornBackwardGetWorkspaceSize(t("gradOutput"), t("normOut"), t("sumOut"), t("out"), ws, ex);
      case Op::post:
        return aclnnMhcPostGetWorkspaceSize(t("x"), t("hRes"), t("hOut"), t("hPost"), t("out"), ws, ex);
      case Op::post_backward:
        return aclnnMhcPostBackwardGetWorkspaceSize(t("gradOutput"), t("x"), t("hRes"), t("hOut"), t("hPost"),
                                                    t("gradX"), t("gradHRes"), t("gradHOut"), t("gradHPost"), ws, ex);
      case Op::pre_sinkhorn:
        return aclnnMhcPreSinkhornGetWorkspaceSize(t("x"), t("phi"), t("alpha"), t("bias"), hc_mult, num_iters,
                                                   hc_eps, norm_eps, need_backward, t("hIn"), t("hPost"), t("hRes"),
                                                   t("hPre"), t("hcBeforeNorm"), t("invRms"), t("sumOut"),
                                                   t("normOut"), ws, ex);
      case Op::pre_sinkhorn_backward:
        return aclnnMhcPreSinkhornBackwardGetWorkspaceSize(
            t("gradHin"), t("gradHPost"), t("gradHRes"), t("x"), t("phi"), t("alpha"), t("bias"), t("hPre"),
            t("hcBeforeNorm"), t("invRms"), t("sumOut"), t("normOut"), hc_eps, t("gradX"), t("gradPhi"),
            t("gradAlpha"), t("gradBias"), ws, ex);
    }
    return -1;
  }
  aclnnStatus run_as(Op op, void* workspace, uint64_t size, aclrtStream stream = nullptr) {
    switch (op) {
      case Op::sinkhorn: return aclnnMhcSinkhorn(workspace, size, executor, stream);
      case Op::sinkhorn_backward: return aclnnMhcSinkhornBackward(workspace, size, executor, stream);
      case Op::post: return aclnnMhcPost(workspace, size, executor, stream);
      case Op::post_backward: return aclnnMhcPostBackward(workspace, size, executor, stream);
      case Op::pre_sinkhorn: return aclnnMhcPreSinkhorn(workspace, size, executor, stream);
      case Op::pre_sinkhorn_backward: return aclnnMhcPreSinkhornBackward(workspace, size, executor, stream);
    }
    return -1;
  }
  aclnnStatus run(void* workspace, uint64_t size, aclrtStream stream = nullptr) {
    return run_as(op_, workspace, size, stream);
  }
  // Phase 2 with a fresh, deliberately misaligned workspace of the asked size.
  aclnnStatus run() {
    workspace_.assign(workspace_size + 1, 0);
    return run(workspace_size ? workspace_.data() + 1 : nullptr, workspace_size);
  }

  bool outputs_untouched() const {
    for (const Slot& s : slots_)
      if (s.output && s.present)
        for (uint8_t b : s.storage)
          if (b != kPattern) return false;
    return true;
  }
  bool untouched(const std::string& name) const {
    for (uint8_t b : slot(name).storage)
      if (b != kPattern) return false;
    return true;
  }
  std::vector<uint8_t> logical_bytes(const std::string& name) const {
    const Slot& s = slot(name);
    const size_t es = s.element_size();
    std::vector<uint8_t> out(size_t(s.numel()) * es);
    for (int64_t i = 0; i < s.numel(); ++i)
      std::memcpy(out.data() + i * es, s.storage.data() + s.storage_index(i) * es, es);
    return out;
  }
  bool gaps_untouched(const std::string& name) const {
    const Slot& s = slot(name);
    const size_t es = s.element_size();
    std::vector<bool> element(s.storage.size(), false);
    for (int64_t i = 0; i < s.numel(); ++i)
      for (size_t b = 0; b < es; ++b) element[s.storage_index(i) * es + b] = true;
    for (size_t b = 0; b < s.storage.size(); ++b)
      if (!element[b] && s.storage[b] != kPattern) return false;
    return true;
  }

  // What the C++ API gives on the slots' inputs: every output the face must
  // write, by name, as logical (row-major) bytes.
  mhc::Status reference(std::map<std::string, std::vector<uint8_t>>* outputs);

  // Scalars of the call.
  float eps = 1e-6f;
  int64_t num_iters = 3;
  int64_t hc_mult = 4;
  double hc_eps = 1e-6, norm_eps = 1e-6;
  bool need_backward = true;
  uint64_t workspace_size = kWorkspaceSentinel;
  aclOpExecutor* executor = kExecutorSentinel;

 private:
  void write_logical(Slot& s, const std::vector<uint8_t>& bytes) {
    const size_t es = s.element_size();
    for (int64_t i = 0; i < s.numel(); ++i)
      std::memcpy(s.storage.data() + s.storage_index(i) * es, bytes.data() + i * es, es);
  }
  // The slot's input bytes, contiguous, as a C++ API view (its own dims, or `dims`).
  mhc::TensorView input(const std::string& name, std::map<std::string, std::vector<uint8_t>>& keep,
                        const std::vector<int64_t>* dims = nullptr) {
    const Slot& s = slot(name);
    keep[name] = logical_bytes(name);
    return view_of(keep[name], s.dtype, dims ? *dims : s.dims);
  }
  mhc::TensorView output(const std::string& name, std::map<std::string, std::vector<uint8_t>>& out,
                         const std::vector<int64_t>* dims = nullptr) {
    const Slot& s = slot(name);
    out[name].assign(size_t(s.numel()) * s.element_size(), 0x5A);
    return view_of(out[name], s.dtype, dims ? *dims : s.dims);
  }
  bool cache_slot_takes(const std::string& name, int64_t count) {
    const Slot& s = slot(name);
    return s.present && !s.output && s.dtype == ACL_FLOAT && s.numel() == count;
  }
  void fill_caches();

  Op op_;
  Config config_;
  std::vector<Slot> slots_;
  std::vector<uint8_t> workspace_;
};

// The token dims of x-like slots: all but the last two dims.
std::vector<int64_t> lead_of(const Slot& s) {
  return s.dims.size() >= 2 ? std::vector<int64_t>(s.dims.begin(), s.dims.end() - 2) : std::vector<int64_t>{};
}

// A backward's caches, as the C++ API's forward writes them (where the slot
// can take them; a slot a test has broken keeps its random values).
void LayerCase::fill_caches() {
  std::map<std::string, std::vector<uint8_t>> keep, out;
  if (op_ == Op::sinkhorn_backward) {
    const Slot& g = slot("gradOutput");
    if (!g.present || g.dtype != ACL_FLOAT || g.dims.size() < 3 || g.numel() == 0) return;
    const std::vector<int64_t> lead = lead_of(g);
    const int64_t N = g.dims.back(), Na = pitch_of(N), T = product(lead);
    const int64_t per_iteration = 2 * T * N * Na;
    const Slot& norm = slot("normOut");
    if (!norm.present || norm.numel() == 0 || norm.numel() % per_iteration != 0) return;
    const int64_t I = norm.numel() / per_iteration;
    const std::vector<int64_t> z_dims = g.dims, norm_dims = concat(concat({2 * I}, lead), {N, Na}),
                               sum_dims = concat(concat({2 * I}, lead), {Na});
    keep["z"] = random_bytes("z", ACL_FLOAT, product(z_dims), 0.0f, 2.0f);
    keep["h"].assign(size_t(product(z_dims)) * 4, 0);
    keep["norm"].assign(size_t(product(norm_dims)) * 4, 0);
    keep["sum"].assign(size_t(product(sum_dims)) * 4, 0);
    mhc::SinkhornForwardInputs in;
    in.z = view_of(keep["z"], ACL_FLOAT, z_dims);
    in.num_iters = I;
    const mhc::SinkhornForwardOutputs o{view_of(keep["h"], ACL_FLOAT, z_dims),
                                        view_of(keep["norm"], ACL_FLOAT, norm_dims),
                                        view_of(keep["sum"], ACL_FLOAT, sum_dims)};
    if (!mhc::sinkhorn_forward(in, o).ok()) return;
    if (cache_slot_takes("normOut", product(norm_dims))) write_logical(slot("normOut"), keep["norm"]);
    if (cache_slot_takes("sumOut", product(sum_dims))) write_logical(slot("sumOut"), keep["sum"]);
  } else if (op_ == Op::pre_sinkhorn_backward) {
    for (const char* name : {"x", "phi", "alpha", "bias"})
      if (!slot(name).present) return;
    for (const char* name : {"phi", "alpha", "bias"})
      if (slot(name).dtype != ACL_FLOAT) return;
    const Slot& x = slot("x");
    if ((x.dtype != ACL_BF16 && x.dtype != ACL_FLOAT16) || x.dims.size() < 3 || x.numel() == 0) return;
    const std::vector<int64_t> lead = lead_of(x);
    const int64_t N = x.dims[x.dims.size() - 2], D = x.dims.back(), F = 2 * N + N * N;
    const Slot& sum = slot("sumOut");
    const int64_t I = sum.dims.size() > 0 && sum.dims[0] >= 2 && sum.dims[0] % 2 == 0 ? sum.dims[0] / 2 : config_.I;
    const std::vector<int64_t> d_dims = concat(lead, {D}), n_dims = concat(lead, {N}), r_dims = concat(lead, {N * N}),
                               f_dims = concat(lead, {F}), sum_dims = concat(concat({2 * I}, lead), {N}),
                               norm_dims = concat(concat({2 * I}, lead), {N, N});
    auto fresh = [&](const char* name, aclDataType dtype, const std::vector<int64_t>& dims) {
      out[name].assign(size_t(product(dims)) * element_size(dtype), 0);
      return view_of(out[name], dtype, dims);
    };
    mhc::PreSinkhornForwardInputs in;
    in.x = input("x", keep);
    in.phi = input("phi", keep);
    in.alpha = input("alpha", keep);
    in.bias = input("bias", keep);
    in.num_iters = I;
    mhc::PreSinkhornForwardOutputs o;
    o.h_in = fresh("h_in", x.dtype, d_dims);
    o.h_post = fresh("h_post", ACL_FLOAT, n_dims);
    o.h_res = fresh("h_res", ACL_FLOAT, r_dims);
    o.inv_rms = fresh("inv_rms", ACL_FLOAT, lead);
    o.h_mix = fresh("h_mix", ACL_FLOAT, f_dims);
    o.h_pre = fresh("h_pre", ACL_FLOAT, n_dims);
    o.norm_out = fresh("norm_out", ACL_FLOAT, norm_dims);
    o.sum_out = fresh("sum_out", ACL_FLOAT, sum_dims);
    mhc::Options options;
    options.hc_eps = hc_eps;
    options.norm_eps = norm_eps;
    if (!mhc::pre_sinkhorn_forward(in, o, options).ok()) return;
    const std::pair<const char*, const char*> caches[] = {
        {"hPre", "h_pre"}, {"hcBeforeNorm", "h_mix"}, {"invRms", "inv_rms"}, {"sumOut", "sum_out"},
        {"normOut", "norm_out"}};
    for (const auto& [name, core_name] : caches)
      if (cache_slot_takes(name, int64_t(out[core_name].size() / 4))) write_logical(slot(name), out[core_name]);
  }
}

mhc::Status LayerCase::reference(std::map<std::string, std::vector<uint8_t>>* outputs) {
  std::map<std::string, std::vector<uint8_t>> keep;
  auto& out = *outputs;
  out.clear();
  auto given = [this](const char* name) { return slot(name).present; };
  switch (op_) {
    case Op::sinkhorn: {
      // Caches of one element (or NULL) are none.
      const bool caches = given("normOut") && given("sumOut") && slot("normOut").numel() != 1 &&
                          slot("sumOut").numel() != 1;
      const std::vector<int64_t> lead = lead_of(slot("x"));
      const int64_t N = slot("x").dims.back(), Na = pitch_of(N);
      const std::vector<int64_t> norm_dims = concat(concat({2 * num_iters}, lead), {N, Na}),
                                 sum_dims = concat(concat({2 * num_iters}, lead), {Na});
      mhc::SinkhornForwardInputs in;
      in.z = input("x", keep);
      in.eps = eps;
      in.num_iters = num_iters;
      mhc::SinkhornForwardOutputs o;
      o.h_res = output("output", out);
      if (caches) {
        o.norm_out = output("normOut", out, &norm_dims);
        o.sum_out = output("sumOut", out, &sum_dims);
      }
      return mhc::sinkhorn_forward(in, o);
    }
    case Op::sinkhorn_backward: {
      const std::vector<int64_t> lead = lead_of(slot("gradOutput"));
      const int64_t N = slot("gradOutput").dims.back(), Na = pitch_of(N);
      const int64_t I = slot("normOut").numel() / (2 * product(lead) * N * Na);
      const std::vector<int64_t> norm_dims = concat(concat({2 * I}, lead), {N, Na}),
                                 sum_dims = concat(concat({2 * I}, lead), {Na});
      mhc::SinkhornBackwardInputs in;
      in.grad_h_res = input("gradOutput", keep);
      in.norm_out = input("normOut", keep, &norm_dims);
      in.sum_out = input("sumOut", keep, &sum_dims);
      mhc::SinkhornBackwardOutputs o;
      o.grad_z = output("out", out);
      return mhc::sinkhorn_backward(in, o);
    }
    case Op::post: {
      mhc::PostForwardInputs in;
      in.x = input("x", keep);
      if (given("hRes")) in.h_res = input("hRes", keep);
      in.h_out = input("hOut", keep);
      in.h_post = input("hPost", keep);
      mhc::PostForwardOutputs o;
      o.out = output("out", out);
      return mhc::post_forward(in, o);
    }
    case Op::post_backward: {
      mhc::PostBackwardInputs in;
      in.grad_out = input("gradOutput", keep);
      in.x = input("x", keep);
      if (given("hRes")) in.h_res = input("hRes", keep);
      in.h_out = input("hOut", keep);
      in.h_post = input("hPost", keep);
      mhc::PostBackwardOutputs o;
      o.grad_x = output("gradX", out);
      o.grad_h_res = output("gradHRes", out);
      o.grad_h_out = output("gradHOut", out);
      o.grad_h_post = output("gradHPost", out);
      return mhc::post_backward(in, o);
    }
    case Op::pre_sinkhorn: {
      mhc::PreSinkhornForwardInputs in;
      in.x = input("x", keep);
      in.phi = input("phi", keep);
      in.alpha = input("alpha", keep);
      in.bias = input("bias", keep);
      in.num_iters = num_iters;
      mhc::PreSinkhornForwardOutputs o;
      o.h_in = output("hIn", out);
      o.h_post = output("hPost", out);
      o.h_res = output("hRes", out);
      if (need_backward) {
        const std::vector<int64_t> lead = lead_of(slot("x"));
        o.inv_rms = output("invRms", out, &lead);  // CANN's [..,1] is the core's [..]
        o.h_mix = output("hcBeforeNorm", out);
        o.h_pre = output("hPre", out);
        o.norm_out = output("normOut", out);
        o.sum_out = output("sumOut", out);
      }
      mhc::Options options;
      options.hc_eps = hc_eps;
      options.norm_eps = norm_eps;
      return mhc::pre_sinkhorn_forward(in, o, options);
    }
    case Op::pre_sinkhorn_backward: {
      const std::vector<int64_t> lead = lead_of(slot("x"));
      mhc::PreSinkhornBackwardInputs in;
      in.grad_h_in = input("gradHin", keep);
      in.grad_h_post = input("gradHPost", keep);
      in.grad_h_res = input("gradHRes", keep);
      in.x = input("x", keep);
      in.phi = input("phi", keep);
      in.alpha = input("alpha", keep);
      in.bias = input("bias", keep);
      in.h_pre = input("hPre", keep);
      in.h_mix = input("hcBeforeNorm", keep);
      in.inv_rms = input("invRms", keep, &lead);
      in.sum_out = input("sumOut", keep);
      in.norm_out = input("normOut", keep);
      mhc::PreSinkhornBackwardOutputs o;
      o.grad_x = output("gradX", out);
      o.grad_phi = output("gradPhi", out);
      o.grad_alpha = output("gradAlpha", out);
      o.grad_bias = output("gradBias", out);
      mhc::Options options;
      options.hc_eps = hc_eps;
      return mhc::pre_sinkhorn_backward(in, o, options);
    }
  }
  return mhc::Status(mhc::StatusCode::internal_error, mhc::ErrorKind::none, "unknown operator");
}

// ---------------------------------------------------------------- the table

// computed: every output is the C++ API's, bit for bit. runs: both phases
// succeed and every output is written (eps values the C++ API refuses).
enum class Outcome { rejected, nothing_run, computed, runs };

struct Row {
  std::string label;
  Op op;
  Config config;
  std::function<void(LayerCase&)> mutate;  // on the slots and scalars, before materialize
  Outcome outcome;
  aclnnStatus code = ACLNN_SUCCESS;  // for rejected rows
  std::string message;               // the winning fault's message contains this
  bool null_workspace_size = false, null_executor = false;
  std::function<void(LayerCase&)> after = nullptr;  // on the aclTensors, after materialize
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.label; }

void drop(Slot& s) { s.present = false; }
void add_rank(Slot& s) { s.dims.push_back(1); }
void private_format(Slot& s) { s.format = ACL_FORMAT_FRACTAL_NZ; }
void other_dtype(Slot& s) { s.dtype = s.dtype == ACL_FLOAT ? ACL_BF16 : s.dtype == ACL_BF16 ? ACL_FLOAT16 : ACL_BF16; }
// Every dim padded by one element, and an offset: a non-contiguous view.
void pad(Slot& s, int64_t offset) {
  s.strides.assign(s.dims.size(), 1);
  for (size_t i = s.dims.size(); i-- > 1;) s.strides[i - 1] = s.strides[i] * (s.dims[i] + 1);
  s.offset = offset;
}

Row rejected(std::string label, Op op, std::function<void(LayerCase&)> mutate, aclnnStatus code,
             std::string message = "", Config config = {}) {
  Row r;
  r.label = std::move(label);
  r.op = op;
  r.config = std::move(config);
  r.mutate = std::move(mutate);
  r.outcome = Outcome::rejected;
  r.code = code;
  r.message = std::move(message);
  return r;
}
Row computed(std::string label, Op op, std::function<void(LayerCase&)> mutate = [](LayerCase&) {},
             Config config = {}) {
  Row r;
  r.label = std::move(label);
  r.op = op;
  r.config = std::move(config);
  r.mutate = std::move(mutate);
  r.outcome = Outcome::computed;
  return r;
}
Row nothing_run(std::string label, Op op, std::function<void(LayerCase&)> mutate, Config config = {}) {
  Row r = computed(std::move(label), op, std::move(mutate), std::move(config));
  r.outcome = Outcome::nothing_run;
  return r;
}
Row runs(std::string label, Op op, std::function<void(LayerCase&)> mutate) {
  Row r = computed(std::move(label), op, std::move(mutate));
  r.outcome = Outcome::runs;
  return r;
}

std::vector<std::string> slot_names(Op op, Config config = {}) {
  LayerCase c(op, config);
  std::vector<std::string> names;
  for (const Slot& s : c.slots())
    if (s.present) names.push_back(s.name);
  return names;
}

// The caches whose shape is free (any shape of the right count, contiguous).
bool free_shape_cache(Op op, const std::string& name) {
  return (op == Op::sinkhorn || op == Op::sinkhorn_backward) && (name == "normOut" || name == "sumOut");
}

// Tensors that must not be NULL: all but post's and post backward's hRes and
// the Sinkhorn's optional caches (NULL there is a cache form: sinkhorn_rows).
std::vector<std::string> required_names(Op op) {
  std::vector<std::string> names;
  for (const std::string& n : slot_names(op))
    if (!((op == Op::post || op == Op::post_backward) && n == "hRes") && !(op == Op::sinkhorn && free_shape_cache(op, n)))
      names.push_back(n);
  return names;
}
// The caches the core requires contiguous.
bool contiguous_cache(Op op, const std::string& name) {
  return (op != Op::post && op != Op::post_backward) && (name == "normOut" || name == "sumOut");
}

// Rules every operator has: one row per rule and tensor.
std::vector<Row> common_rows(Op op) {
  const std::string o = op_name(op);
  std::vector<Row> rows;
  rows.push_back(computed(o + "_baseline", op));
  rows.push_back(rejected(o + "_null_workspaceSize", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_NULLPTR,
                          "workspaceSize is NULL"));
  rows.back().null_workspace_size = true;
  rows.push_back(rejected(o + "_null_executor", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_NULLPTR, "executor is NULL"));
  rows.back().null_executor = true;
  for (const std::string& n : required_names(op))
    rows.push_back(rejected(o + "_null_" + n, op, [n](LayerCase& c) { drop(c.slot(n)); }, ACLNN_ERR_PARAM_NULLPTR,
                            n + " is NULL"));
  for (const std::string& n : slot_names(op)) {
    if (!free_shape_cache(op, n))
      rows.push_back(rejected(o + "_rank_" + n, op,
                              [n](LayerCase& c) {
                                std::vector<int64_t>& dims = c.slot(n).dims;
                                // x [T,N,D] + [1] would read as [B,S,N,D]: [T,N*D] instead
                                if (n == "x" && c.op() != Op::sinkhorn) dims = {dims[0], dims[1] * dims[2]};
                                else add_rank(c.slot(n));
                              },
                              ACLNN_ERR_PARAM_INVALID));
    rows.push_back(rejected(o + "_shape_" + n, op, [n](LayerCase& c) { c.slot(n).dims.back() += 1; },
                            ACLNN_ERR_PARAM_INVALID));
    rows.push_back(rejected(o + "_dtype_" + n, op, [n](LayerCase& c) { other_dtype(c.slot(n)); },
                            ACLNN_ERR_PARAM_INVALID));
    rows.push_back(rejected(o + "_format_" + n, op, [n](LayerCase& c) { private_format(c.slot(n)); },
                            ACLNN_ERR_PARAM_INVALID, "private format ACL_FORMAT_FRACTAL_NZ"));
    // 50: no enumerator, yet inside aclFormat's range of values (a C++ cast to it is defined).
    rows.push_back(rejected(o + "_unknown_format_" + n, op,
                            [n](LayerCase& c) { c.slot(n).format = static_cast<aclFormat>(50); },
                            ACLNN_ERR_PARAM_INVALID, "unknown aclFormat 50"));
    rows.push_back(rejected(o + "_null_data_" + n, op, [n](LayerCase& c) { c.slot(n).null_data = true; },
                            ACLNN_ERR_PARAM_NULLPTR, n + ": data pointer is null"));
    rows.push_back(rejected(o + "_view_outside_storage_" + n, op,
                            [n](LayerCase& c) { c.slot(n).declared_storage_delta = -1; }, ACLNN_ERR_PARAM_INVALID,
                            n + ": view"));
    rows.push_back(rejected(o + "_destroyed_" + n, op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID,
                            n + ": not a live aclTensor"));
    rows.back().after = [n](LayerCase& c) { (void)aclDestroyTensor(c.slot(n).tensor); };
    // Non-contiguous views are accepted wherever the core takes them.
    if (!contiguous_cache(op, n))
      rows.push_back(computed(o + "_strided_" + n, op, [n](LayerCase& c) { pad(c.slot(n), 3); }));
    else
      rows.push_back(rejected(o + "_strided_" + n, op, [n](LayerCase& c) { pad(c.slot(n), 3); },
                              ACLNN_ERR_PARAM_INVALID, "contiguous"));
  }
  // Every tensor strided and offset at once, the caches that must be contiguous only offset.
  rows.push_back(computed(o + "_all_strided", op, [op](LayerCase& c) {
    int64_t offset = 1;
    for (Slot& s : c.slots()) {
      if (contiguous_cache(op, s.name)) s.offset = offset++;
      else pad(s, offset++);
    }
  }));
  // [T,...] as [1,T,...] and as [B,S,...].
  rows.push_back(computed(o + "_bsnd_1x5", op, [](LayerCase&) {}, Config{.lead = {1, 5}}));
  rows.push_back(computed(o + "_bsnd_2x3", op, [](LayerCase&) {}, Config{.lead = {2, 3}}));
  // Any N (odd, past one pitch of 8) and D.
  rows.push_back(computed(o + "_N3_D37", op, [](LayerCase&) {}, Config{.N = 3, .D = 37}));
  rows.push_back(computed(o + "_N9_D5", op, [](LayerCase&) {}, Config{.N = 9, .D = 5, .I = 2}));
  rows.push_back(computed(o + "_N1_D1", op, [](LayerCase&) {}, Config{.lead = {2}, .N = 1, .D = 1, .I = 1}));
  return rows;
}

// x-typed operators: fp16 too, fp32 x rejected as CANN rejects it.
std::vector<Row> x_dtype_rows(Op op, const std::string& x_name) {
  const std::string o = op_name(op);
  Config fp16;
  fp16.x_dtype = ACL_FLOAT16;
  return {
      computed(o + "_fp16", op, [](LayerCase&) {}, fp16),
      rejected(o + "_" + x_name + "_fp32", op,
               [](LayerCase& c) {
                 for (Slot& s : c.slots())
                   if (s.dtype == ACL_BF16) s.dtype = ACL_FLOAT;
               },
               ACLNN_ERR_PARAM_INVALID, x_name + ": ACL_FLOAT is not supported"),
      rejected(o + "_" + x_name + "_int8", op, [x_name](LayerCase& c) { c.slot(x_name).dtype = ACL_INT8; },
               ACLNN_ERR_PARAM_INVALID, x_name + ": expected ACL_BF16 or ACL_FLOAT16, got ACL_INT8"),
  };
}

void empty_tokens(LayerCase& c) {
  for (Slot& s : c.slots()) {
    if (s.name == "phi" || s.name == "alpha" || s.name == "bias" || s.name == "gradPhi" || s.name == "gradAlpha" ||
        s.name == "gradBias")
      continue;
    const bool step = s.name == "sumOut" || s.name == "normOut";
    s.dims[step ? 1 : 0] = 0;  // T = 0
  }
}

std::vector<Row> sinkhorn_rows() {
  const Op op = Op::sinkhorn;
  const std::string o = op_name(op);
  const int64_t T = 5, N = 4, Na = 8, I = 3;
  auto one_element = [](Slot& s) { s.dims = {1}; };
  std::vector<Row> rows = {
      // The cache forms.
      computed(o + "_caches_both_null", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_caches_both_one_element", op,
               [one_element](LayerCase& c) { one_element(c.slot("normOut")); one_element(c.slot("sumOut")); }),
      computed(o + "_caches_one_element_of_any_dtype_and_format", op,
               [one_element](LayerCase& c) {
                 for (const char* n : {"normOut", "sumOut"}) {
                   one_element(c.slot(n));
                   c.slot(n).dtype = ACL_INT64;
                   c.slot(n).format = ACL_FORMAT_FRACTAL_NZ;
                 }
               }),
      computed(o + "_caches_null_and_one_element", op,
               [one_element](LayerCase& c) { drop(c.slot("normOut")); one_element(c.slot("sumOut")); }),
      rejected(o + "_caches_normOut_null_sumOut_given", op, [](LayerCase& c) { drop(c.slot("normOut")); },
               ACLNN_ERR_PARAM_INVALID, "normOut NULL, sumOut given"),
      rejected(o + "_caches_sumOut_null_normOut_given", op, [](LayerCase& c) { drop(c.slot("sumOut")); },
               ACLNN_ERR_PARAM_INVALID, "normOut given, sumOut NULL"),
      rejected(o + "_caches_one_element_and_given", op,
               [one_element](LayerCase& c) { one_element(c.slot("normOut")); }, ACLNN_ERR_PARAM_INVALID,
               "normOut of one element (none), sumOut given"),
      // Any shape of the right count, contiguous.
      computed(o + "_caches_flat", op,
               [=](LayerCase& c) {
                 c.slot("normOut").dims = {2 * I * T * N * Na};
                 c.slot("sumOut").dims = {2 * I * T * Na};
               }),
      computed(o + "_caches_in_cann_documented_order", op,
               [=](LayerCase& c) {
                 c.slot("normOut").dims = {2 * I, N, Na, T};
                 c.slot("sumOut").dims = {2 * I, Na, T};
               }),
      computed(o + "_caches_offset", op, [](LayerCase& c) { c.slot("normOut").offset = 7; c.slot("sumOut").offset = 1; }),
      rejected(o + "_normOut_count", op, [=](LayerCase& c) { c.slot("normOut").dims = {2 * I * T * N * Na + 1}; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected " + std::to_string(2 * I * T * N * Na) + " elements"),
      rejected(o + "_sumOut_count_of_another_numIters", op, [=](LayerCase& c) { c.slot("sumOut").dims[0] = 2 * I + 2; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected " + std::to_string(2 * I * T * Na) + " elements"),
      rejected(o + "_sumOut_empty", op, [](LayerCase& c) { c.slot("sumOut").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "sumOut: empty tensor [0,5,8] is not supported"),
      rejected(o + "_caches_transposed_view", op,
               [=](LayerCase& c) {
                 Slot& s = c.slot("sumOut");
                 s.dims = {2 * I * T, Na};
                 s.strides = {1, 2 * I * T};
               },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected a contiguous tensor"),
      // numIters: 1 to 100.
      computed(o + "_numIters_1", op, [](LayerCase& c) { c.num_iters = 1; }, Config{.I = 1}),
      computed(o + "_numIters_100", op, [](LayerCase& c) { c.num_iters = 100; }, Config{.lead = {2}, .I = 100}),
      rejected(o + "_numIters_0", op, [](LayerCase& c) { c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 0"),
      rejected(o + "_numIters_101", op, [](LayerCase& c) { c.num_iters = 101; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 101"),
      rejected(o + "_numIters_negative", op, [](LayerCase& c) { c.num_iters = -3; }, ACLNN_ERR_PARAM_INVALID,
               "got -3"),
      // x: fp32, [..,N,N], not empty.
      rejected(o + "_x_bf16", op, [](LayerCase& c) { c.slot("x").dtype = ACL_BF16; }, ACLNN_ERR_PARAM_INVALID,
               "x: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_x_not_square", op,
               [](LayerCase& c) { c.slot("x").dims = {5, 4, 3}; c.slot("output").dims = {5, 4, 3}; },
               ACLNN_ERR_PARAM_INVALID, "x: expected [T,N,N]=[5,3,3], got [5,4,3]"),
      rejected(o + "_x_rank_2", op, [](LayerCase& c) { c.slot("x").dims = {5, 16}; c.slot("output").dims = {5, 16}; },
               ACLNN_ERR_PARAM_INVALID, "x: expected rank 3 or 4"),
      rejected(o + "_x_empty", op, [](LayerCase& c) { empty_tokens(c); }, ACLNN_ERR_PARAM_INVALID,
               "x: empty tensor [0,4,4] is not supported"),
      rejected(o + "_x_empty_without_caches", op, [](LayerCase& c) { empty_tokens(c); }, ACLNN_ERR_PARAM_INVALID,
               "x: empty tensor", Config{.optional = false}),
      rejected(o + "_x_N0", op, [](LayerCase& c) { c.slot("x").dims = {5, 0, 0}; c.slot("output").dims = {5, 0, 0}; },
               ACLNN_ERR_PARAM_INVALID, "x: empty tensor", Config{.optional = false}),
      rejected(o + "_output_empty", op, [](LayerCase& c) { c.slot("output").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "output: expected [5,4,4] (x's shape), got [0,4,4]"),
      // Formats: plain ones, shared with x.
      computed(o + "_all_NCHW", op,
               [](LayerCase& c) {
                 for (Slot& s : c.slots()) s.format = ACL_FORMAT_NCHW;
               }),
      rejected(o + "_output_format_not_x", op, [](LayerCase& c) { c.slot("output").format = ACL_FORMAT_NCHW; },
               ACLNN_ERR_PARAM_INVALID, "output: expected x's format ACL_FORMAT_ND, got ACL_FORMAT_NCHW"),
      rejected(o + "_sumOut_format_not_x", op, [](LayerCase& c) { c.slot("sumOut").format = ACL_FORMAT_NC; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected x's format ACL_FORMAT_ND, got ACL_FORMAT_NC"),
      // Outputs overlapping an input: the core's check, in CANN's names.
      rejected(o + "_output_overlaps_x", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "output"),
      // Order: the cache form before dtypes, dtypes before shapes, shapes before formats, formats before empty x.
      rejected(o + "_null_output_before_cache_form", op,
               [](LayerCase& c) { drop(c.slot("output")); drop(c.slot("sumOut")); }, ACLNN_ERR_PARAM_NULLPTR,
               "output is NULL"),
      rejected(o + "_cache_form_before_dtype", op,
               [](LayerCase& c) { drop(c.slot("sumOut")); c.slot("x").dtype = ACL_BF16; }, ACLNN_ERR_PARAM_INVALID,
               "come both or neither"),
      rejected(o + "_dtype_before_numIters", op,
               [](LayerCase& c) { c.slot("normOut").dtype = ACL_BF16; c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "normOut: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_output_shape_before_numIters", op,
               [](LayerCase& c) { c.slot("output").dims[1] = 3; c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "output: expected [5,4,4] (x's shape)"),
      rejected(o + "_numIters_before_rank", op,
               [](LayerCase& c) {
                 c.num_iters = 101;
                 c.slot("x").dims = {5, 16};
                 c.slot("output").dims = {5, 16};
               },
               ACLNN_ERR_PARAM_INVALID, "numIters"),
      rejected(o + "_shape_before_format", op,
               [](LayerCase& c) {
                 c.slot("x").dims = {5, 4, 3};
                 c.slot("output").dims = {5, 4, 3};
                 c.slot("output").format = ACL_FORMAT_NCHW;
               },
               ACLNN_ERR_PARAM_INVALID, "x: expected [T,N,N]"),
      rejected(o + "_format_before_empty_x", op,
               [](LayerCase& c) { empty_tokens(c); c.slot("output").format = ACL_FORMAT_NCHW; },
               ACLNN_ERR_PARAM_INVALID, "output: expected x's format"),
      rejected(o + "_empty_x_before_cache_count", op,
               [](LayerCase& c) { empty_tokens(c); c.slot("normOut").dims = {7}; }, ACLNN_ERR_PARAM_INVALID,
               "x: empty tensor"),
      rejected(o + "_cache_count_before_null_data", op,
               [](LayerCase& c) { c.slot("x").null_data = true; c.slot("normOut").dims = {7}; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected"),
      // eps is not checked (the C++ API checks it: no reference here).
      runs(o + "_eps_nan", op, [](LayerCase& c) { c.eps = std::numeric_limits<float>::quiet_NaN(); }),
      runs(o + "_eps_negative", op, [](LayerCase& c) { c.eps = -0.5f; }),
  };
  for (Row& r : rows)
    if (r.label == o + "_output_overlaps_x") r.after = [](LayerCase& c) { c.alias("output", "x"); };
  return rows;
}

std::vector<Row> sinkhorn_backward_rows() {
  const Op op = Op::sinkhorn_backward;
  const std::string o = op_name(op);
  const int64_t T = 5, N = 4, Na = 8;
  std::vector<Row> rows = {
      // I from the caches' sizes.
      computed(o + "_I_from_the_caches_2", op,
               [=](LayerCase& c) { c.slot("normOut").dims[0] = 4; c.slot("sumOut").dims[0] = 4; }),
      computed(o + "_I_from_the_caches_1_flat", op,
               [=](LayerCase& c) { c.slot("normOut").dims = {2 * T * N * Na}; c.slot("sumOut").dims = {2 * T * Na}; }),
      rejected(o + "_normOut_not_a_multiple", op, [](LayerCase& c) { c.slot("normOut").dims = {1000}; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected 2*I*T*N*Na floats (T=5, N=4, Na=8; a multiple of 320)"),
      rejected(o + "_normOut_empty", op, [](LayerCase& c) { c.slot("normOut").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "normOut: expected 2*I*T*N*Na floats"),
      rejected(o + "_sumOut_of_another_I", op, [](LayerCase& c) { c.slot("sumOut").dims[0] = 4; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected 2*I*T*Na = 240 floats (I=3 from normOut), got 160"),
      rejected(o + "_normOut_not_contiguous", op,
               [=](LayerCase& c) {
                 Slot& s = c.slot("normOut");
                 s.dims = {6 * T * N, Na};
                 s.strides = {1, 6 * T * N};
               },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected a contiguous tensor"),
      // An empty gradOutput: success, nothing run.
      nothing_run(o + "_empty_gradOutput", op, [](LayerCase& c) { c.slot("gradOutput").dims[0] = 0; c.slot("out").dims[0] = 0; }),
      nothing_run(o + "_empty_gradOutput_with_empty_caches", op,
                  [](LayerCase& c) {
                    c.slot("gradOutput").dims[0] = 0;
                    c.slot("out").dims[0] = 0;
                    c.slot("normOut").dims = {0};
                    c.slot("sumOut").dims = {0};
                  }),
      nothing_run(o + "_empty_bsnd", op,
                  [](LayerCase& c) { c.slot("gradOutput").dims = {2, 0, 4, 4}; c.slot("out").dims = {2, 0, 4, 4}; }),
      rejected(o + "_empty_out_only", op, [](LayerCase& c) { c.slot("out").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "out: expected [5,4,4] (gradOutput's shape)"),
      rejected(o + "_gradOutput_not_square", op,
               [](LayerCase& c) { c.slot("gradOutput").dims = {5, 4, 5}; c.slot("out").dims = {5, 4, 5}; },
               ACLNN_ERR_PARAM_INVALID, "gradOutput: expected [T,N,N]=[5,5,5], got [5,4,5]"),
      rejected(o + "_out_format_not_gradOutput", op, [](LayerCase& c) { c.slot("out").format = ACL_FORMAT_NHWC; },
               ACLNN_ERR_PARAM_INVALID, "out: expected gradOutput's format ACL_FORMAT_ND, got ACL_FORMAT_NHWC"),
      computed(o + "_caches_format_not_checked_by_cann", op,
               [](LayerCase& c) { c.slot("normOut").format = ACL_FORMAT_NCHW; }),
      rejected(o + "_out_overlaps_normOut", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "out"),
      // Order: NULL before dtypes before shapes before formats before the empty case, which comes before the caches' sizes.
      rejected(o + "_null_out_before_dtype", op,
               [](LayerCase& c) { drop(c.slot("out")); c.slot("gradOutput").dtype = ACL_BF16; }, ACLNN_ERR_PARAM_NULLPTR,
               "out is NULL"),
      rejected(o + "_dtype_before_shape", op,
               [](LayerCase& c) { c.slot("sumOut").dtype = ACL_FLOAT16; c.slot("out").dims[0] = 4; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected ACL_FLOAT, got ACL_FLOAT16"),
      rejected(o + "_shape_before_format", op,
               [](LayerCase& c) { c.slot("out").dims[0] = 4; c.slot("out").format = ACL_FORMAT_NCHW; },
               ACLNN_ERR_PARAM_INVALID, "out: expected [5,4,4]"),
      rejected(o + "_format_before_empty", op,
               [](LayerCase& c) {
                 c.slot("gradOutput").dims[0] = 0;
                 c.slot("out").dims[0] = 0;
                 c.slot("out").format = ACL_FORMAT_NCHW;
               },
               ACLNN_ERR_PARAM_INVALID, "out: expected gradOutput's format"),
      nothing_run(o + "_empty_before_caches_sizes", op,
                  [](LayerCase& c) {
                    c.slot("gradOutput").dims[0] = 0;
                    c.slot("out").dims[0] = 0;
                    c.slot("normOut").dims = {7};
                  }),
      rejected(o + "_caches_sizes_before_null_data", op,
               [](LayerCase& c) { c.slot("gradOutput").null_data = true; c.slot("sumOut").dims = {7}; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected 2*I*T*Na"),
  };
  for (Row& r : rows)
    if (r.label == o + "_out_overlaps_normOut") r.after = [](LayerCase& c) { c.alias("out", "normOut"); };
  return rows;
}

std::vector<Row> post_rows() {
  const Op op = Op::post;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "x");
  std::vector<Row> more = {
      computed(o + "_without_hRes", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_without_hRes_strided", op,
               [](LayerCase& c) {
                 int64_t offset = 2;
                 for (Slot& s : c.slots()) pad(s, offset++);
               },
               Config{.optional = false}),
      rejected(o + "_hOut_not_x_dtype", op, [](LayerCase& c) { c.slot("hOut").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "hOut: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"),
      rejected(o + "_out_not_x_dtype", op, [](LayerCase& c) { c.slot("out").dtype = ACL_FLOAT; },
               ACLNN_ERR_PARAM_INVALID, "out: expected ACL_BF16 (x's dtype), got ACL_FLOAT"),
      rejected(o + "_hRes_rank_3_with_bsnd_x", op, [](LayerCase& c) { c.slot("hRes").dims = {5, 4, 4}; },
               ACLNN_ERR_PARAM_INVALID, "hRes: expected rank 4", Config{.lead = {1, 5}}),
      // Empty inputs: success, nothing run (T = 0, N = 0 or D = 0).
      nothing_run(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }),
      nothing_run(o + "_empty_T_without_hRes", op, [](LayerCase& c) { empty_tokens(c); }, Config{.optional = false}),
      nothing_run(o + "_empty_N", op, [](LayerCase&) {}, Config{.N = 0}),
      nothing_run(o + "_empty_D", op, [](LayerCase&) {}, Config{.D = 0}),
      nothing_run(o + "_empty_bsnd", op, [](LayerCase&) {}, Config{.lead = {0, 5}}),
      rejected(o + "_empty_hOut_only", op, [](LayerCase& c) { c.slot("hOut").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "hOut: expected [T,D]=[5,8], got [0,8]"),
      // The formats CANN does not check come after what it checks.
      rejected(o + "_hOut_format_after_shapes", op,
               [](LayerCase& c) { c.slot("hOut").format = ACL_FORMAT_FRACTAL_NZ; c.slot("hPost").dims[1] = 5; },
               ACLNN_ERR_PARAM_INVALID, "hPost: expected [T,N]=[5,4], got [5,5]"),
      nothing_run(o + "_hRes_format_not_looked_at_when_empty", op,
                  [](LayerCase& c) { empty_tokens(c); c.slot("hRes").format = ACL_FORMAT_FRACTAL_NZ; }),
      rejected(o + "_out_overlaps_hOut", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "out"),
      // Order: NULL -> formats of x and out -> dtypes -> ranks -> shapes -> empty.
      rejected(o + "_null_hPost_before_format", op,
               [](LayerCase& c) { drop(c.slot("hPost")); c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_NULLPTR, "hPost is NULL"),
      rejected(o + "_format_before_dtype", op,
               [](LayerCase& c) { c.slot("out").format = ACL_FORMAT_NC1HWC0; c.slot("x").dtype = ACL_INT32; },
               ACLNN_ERR_PARAM_INVALID, "out: private format ACL_FORMAT_NC1HWC0"),
      rejected(o + "_dtype_before_rank", op,
               [](LayerCase& c) { c.slot("hPost").dtype = ACL_BF16; add_rank(c.slot("hOut")); },
               ACLNN_ERR_PARAM_INVALID, "hPost: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_rank_before_shape", op,
               [](LayerCase& c) { add_rank(c.slot("out")); c.slot("hRes").dims[1] = 3; }, ACLNN_ERR_PARAM_INVALID,
               "out: expected rank 3"),
      rejected(o + "_shape_before_empty", op, [](LayerCase& c) { empty_tokens(c); c.slot("out").dims[0] = 5; },
               ACLNN_ERR_PARAM_INVALID, "out: expected [T,N,D]=[0,4,8], got [5,4,8]"),
      nothing_run(o + "_empty_before_null_data", op, [](LayerCase& c) { empty_tokens(c); c.slot("x").null_data = true; }),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_out_overlaps_hOut") r.after = [](LayerCase& c) { c.alias("out", "hOut"); };
  }
  return rows;
}

std::vector<Row> post_backward_rows() {
  const Op op = Op::post_backward;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "gradOutput");
  std::vector<Row> more = {
      computed(o + "_without_hRes", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_without_hRes_bsnd_fp16", op, [](LayerCase&) {},
               Config{.lead = {2, 3}, .x_dtype = ACL_FLOAT16, .optional = false}),
      rejected(o + "_gradX_fp32_is_not_cann", op, [](LayerCase& c) { c.slot("gradX").dtype = ACL_FLOAT; },
               ACLNN_ERR_PARAM_INVALID, "gradX: expected ACL_BF16 (gradOutput's dtype), got ACL_FLOAT"),
      rejected(o + "_x_not_gradOutput_dtype", op, [](LayerCase& c) { c.slot("x").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "x: expected ACL_BF16 (gradOutput's dtype), got ACL_FLOAT16"),
      rejected(o + "_null_gradHRes_without_hRes", op, [](LayerCase& c) { drop(c.slot("gradHRes")); },
               ACLNN_ERR_PARAM_NULLPTR, "gradHRes is NULL", Config{.optional = false}),
      // Empty inputs: 161002, before the formats.
      rejected(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }, ACLNN_ERR_PARAM_INVALID,
               "gradOutput: empty tensor [0,4,8] is not supported"),
      rejected(o + "_empty_D", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "gradOutput: empty tensor",
               Config{.D = 0}),
      rejected(o + "_empty_hPost_only", op, [](LayerCase& c) { c.slot("hPost").dims[1] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "hPost: empty tensor [5,0]"),
      rejected(o + "_empty_hRes_before_format", op,
               [](LayerCase& c) { c.slot("hRes").dims[0] = 0; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "hRes: empty tensor"),
      rejected(o + "_empty_output_is_a_shape_error", op, [](LayerCase& c) { c.slot("gradHOut").dims[0] = 0; },
               ACLNN_ERR_PARAM_INVALID, "gradHOut: expected [T,D]=[5,8], got [0,8]"),
      rejected(o + "_gradHRes_overlaps_gradX", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "gradHRes"),
      // Order: NULL -> empty -> input formats -> dtypes -> ranks -> shapes -> output formats (CANN does not check them).
      rejected(o + "_null_gradHPost_before_empty", op,
               [](LayerCase& c) { drop(c.slot("gradHPost")); empty_tokens(c); }, ACLNN_ERR_PARAM_NULLPTR,
               "gradHPost is NULL"),
      rejected(o + "_format_before_dtype", op,
               [](LayerCase& c) { c.slot("hPost").format = ACL_FORMAT_FRACTAL_Z; c.slot("x").dtype = ACL_INT8; },
               ACLNN_ERR_PARAM_INVALID, "hPost: private format ACL_FORMAT_FRACTAL_Z"),
      rejected(o + "_dtype_before_rank", op,
               [](LayerCase& c) { c.slot("gradHPost").dtype = ACL_BF16; add_rank(c.slot("hOut")); },
               ACLNN_ERR_PARAM_INVALID, "gradHPost: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_rank_before_shape", op,
               [](LayerCase& c) { add_rank(c.slot("gradHPost")); c.slot("gradOutput").dims[2] += 1; },
               ACLNN_ERR_PARAM_INVALID, "gradHPost: expected rank 2"),
      rejected(o + "_shape_before_output_format", op,
               [](LayerCase& c) { c.slot("gradHRes").dims[1] = 3; c.slot("gradX").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "gradHRes: expected [T,N,N]=[5,4,4], got [5,3,4]"),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_gradHRes_overlaps_gradX") r.after = [](LayerCase& c) { c.alias("gradHRes", "gradX"); };
  }
  return rows;
}

std::vector<Row> pre_sinkhorn_rows() {
  const Op op = Op::pre_sinkhorn;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "x");
  std::vector<Row> more = {
      // needBackward false: the caches are not looked at and not written.
      computed(o + "_without_needBackward", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_without_needBackward_caches_given_are_untouched", op,
               [](LayerCase& c) {
                 c.need_backward = false;
                 c.slot("hPre").dtype = ACL_INT32;
                 c.slot("invRms").dims = {7};
                 c.slot("sumOut").format = ACL_FORMAT_FRACTAL_NZ;
               }),
      computed(o + "_without_needBackward_caches_destroyed", op, [](LayerCase& c) { c.need_backward = false; }),
      rejected(o + "_needBackward_null_hcBeforeNorm", op, [](LayerCase& c) { drop(c.slot("hcBeforeNorm")); },
               ACLNN_ERR_PARAM_NULLPTR, "hcBeforeNorm is NULL (required: needBackward is true)"),
      // hcMult is x's N (any N).
      rejected(o + "_hcMult_not_N", op, [](LayerCase& c) { c.hc_mult = 5; }, ACLNN_ERR_PARAM_INVALID,
               "hcMult must equal x's N=4 [5,4,8], got 5"),
      rejected(o + "_hcMult_4_with_N2", op, [](LayerCase& c) { c.hc_mult = 4; }, ACLNN_ERR_PARAM_INVALID,
               "hcMult must equal x's N=2", Config{.N = 2, .D = 16}),
      computed(o + "_hcMult_N2", op, [](LayerCase&) {}, Config{.N = 2, .D = 16}),
      // numIters: 1 to 100 (CANN's 20 only is dropped).
      computed(o + "_numIters_1", op, [](LayerCase&) {}, Config{.I = 1}),
      computed(o + "_numIters_100", op, [](LayerCase&) {}, Config{.lead = {2}, .I = 100}),
      rejected(o + "_numIters_0", op, [](LayerCase& c) { c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 0"),
      rejected(o + "_numIters_101", op, [](LayerCase& c) { c.num_iters = 101; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 101"),
      rejected(o + "_numIters_not_the_caches", op, [](LayerCase& c) { c.num_iters = 2; }, ACLNN_ERR_PARAM_INVALID,
               "sumOut: expected [2I,T,N]=[4,5,4], got [6,5,4]"),
      // Shapes: hRes [..,N*N] or [..,N,N]; invRms [..,1]; alpha [3]; F = 2N+N*N.
      computed(o + "_hRes_as_matrices", op, [](LayerCase& c) { c.slot("hRes").dims = {5, 4, 4}; }),
      rejected(o + "_invRms_without_its_1", op, [](LayerCase& c) { c.slot("invRms").dims = {5}; },
               ACLNN_ERR_PARAM_INVALID, "invRms: expected [T,1]=[5,1], got [5]"),
      rejected(o + "_alpha_2_entries", op, [](LayerCase& c) { c.slot("alpha").dims = {2}; }, ACLNN_ERR_PARAM_INVALID,
               "alpha: expected [3], got [2]"),
      rejected(o + "_phi_permutation_rows", op, [](LayerCase& c) { c.slot("phi").dims[0] = 32; },
               ACLNN_ERR_PARAM_INVALID, "phi: expected [F,K]=[24,32] (F=2N+N*N, K=N*D), got [32,32]"),
      rejected(o + "_hIn_not_x_dtype", op, [](LayerCase& c) { c.slot("hIn").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "hIn: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"),
      // Empty inputs: success, nothing run.
      nothing_run(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }),
      nothing_run(o + "_empty_T_without_needBackward", op, [](LayerCase& c) { empty_tokens(c); },
                  Config{.optional = false}),
      nothing_run(o + "_empty_D", op, [](LayerCase&) {}, Config{.D = 0}),
      rejected(o + "_hRes_overlaps_hPost", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "hRes"),
      // Order: NULL -> dtypes -> rank -> hcMult -> numIters -> shapes -> formats -> empty.
      rejected(o + "_null_bias_before_dtype", op,
               [](LayerCase& c) { drop(c.slot("bias")); c.slot("x").dtype = ACL_INT8; }, ACLNN_ERR_PARAM_NULLPTR,
               "bias is NULL"),
      rejected(o + "_dtype_before_hcMult", op, [](LayerCase& c) { c.slot("normOut").dtype = ACL_BF16; c.hc_mult = 7; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_rank_before_hcMult", op, [](LayerCase& c) { c.slot("x").dims = {5, 32}; c.hc_mult = 7; },
               ACLNN_ERR_PARAM_INVALID, "x: expected rank 3 or 4"),
      rejected(o + "_hcMult_before_numIters", op, [](LayerCase& c) { c.hc_mult = 7; c.num_iters = 0; },
               ACLNN_ERR_PARAM_INVALID, "hcMult must equal"),
      rejected(o + "_numIters_before_shape", op, [](LayerCase& c) { c.num_iters = 0; c.slot("hIn").dims[1] = 9; },
               ACLNN_ERR_PARAM_INVALID, "numIters"),
      rejected(o + "_shape_before_format", op,
               [](LayerCase& c) { c.slot("hPre").dims[1] = 9; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "hPre: expected [T,N]=[5,4], got [5,9]"),
      rejected(o + "_format_before_empty", op,
               [](LayerCase& c) { empty_tokens(c); c.slot("hcBeforeNorm").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "hcBeforeNorm: private format"),
      nothing_run(o + "_empty_before_null_data", op, [](LayerCase& c) { empty_tokens(c); c.slot("hRes").null_data = true; }),
      // eps values are not checked (the C++ API checks them: no reference here).
      runs(o + "_eps_nan", op,
               [](LayerCase& c) {
                 c.hc_eps = std::numeric_limits<double>::quiet_NaN();
                 c.norm_eps = -1.0;
               }),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_hRes_overlaps_hPost") r.after = [](LayerCase& c) { c.alias("hRes", "hPost"); };
    if (r.label == o + "_without_needBackward_caches_destroyed")
      r.after = [](LayerCase& c) {
        for (const char* n : {"hPre", "hcBeforeNorm", "invRms", "sumOut", "normOut"}) (void)aclDestroyTensor(c.slot(n).tensor);
      };
  }
  return rows;
}

std::vector<Row> pre_sinkhorn_backward_rows() {
  const Op op = Op::pre_sinkhorn_backward;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "x");
  std::vector<Row> more = {
      computed(o + "_gradHRes_as_matrices", op, [](LayerCase& c) { c.slot("gradHRes").dims = {5, 4, 4}; }),
      computed(o + "_I_from_sumOut", op,
               [](LayerCase& c) { c.slot("sumOut").dims[0] = 10; c.slot("normOut").dims[0] = 10; }),
      rejected(o + "_sumOut_odd_steps", op,
               [](LayerCase& c) { c.slot("sumOut").dims[0] = 5; c.slot("normOut").dims[0] = 5; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected [2I,..,N] with 2I even and >= 2 (I iterations), got [5,5,4]"),
      rejected(o + "_normOut_other_steps", op, [](LayerCase& c) { c.slot("normOut").dims[0] = 4; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected [2I,T,N,N]=[6,5,4,4], got [4,5,4,4]"),
      rejected(o + "_invRms_without_its_1", op, [](LayerCase& c) { c.slot("invRms").dims = {5}; },
               ACLNN_ERR_PARAM_INVALID, "invRms: expected rank 2"),
      rejected(o + "_gradX_not_x_dtype", op, [](LayerCase& c) { c.slot("gradX").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "gradX: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"),
      rejected(o + "_sumOut_not_contiguous_core", op, [](LayerCase& c) { pad(c.slot("sumOut"), 0); },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected a contiguous tensor"),
      // Empty inputs: success, nothing run, before any other check but NULL.
      nothing_run(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }),
      nothing_run(o + "_empty_hPre_only", op, [](LayerCase& c) { c.slot("hPre").dims[0] = 0; }),
      nothing_run(o + "_empty_normOut_steps", op, [](LayerCase& c) { c.slot("normOut").dims[0] = 0; }),
      nothing_run(o + "_empty_before_rank", op, [](LayerCase& c) { c.slot("gradHin").dims[0] = 0; add_rank(c.slot("x")); }),
      nothing_run(o + "_empty_before_dtype", op,
                  [](LayerCase& c) { c.slot("invRms").dims[0] = 0; c.slot("gradX").dtype = ACL_INT64; }),
      rejected(o + "_empty_phi_is_a_shape_error", op, [](LayerCase& c) { c.slot("phi").dims[0] = 0; },
               ACLNN_ERR_PARAM_INVALID, "phi: expected [F,K]=[24,32]"),
      rejected(o + "_gradPhi_overlaps_phi", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "gradPhi"),
      // Order: NULL -> empty -> ranks -> shapes -> dtypes -> formats.
      rejected(o + "_null_gradBias_before_empty", op,
               [](LayerCase& c) { drop(c.slot("gradBias")); c.slot("x").dims[0] = 0; }, ACLNN_ERR_PARAM_NULLPTR,
               "gradBias is NULL"),
      rejected(o + "_rank_before_shape", op,
               [](LayerCase& c) { add_rank(c.slot("gradAlpha")); c.slot("phi").dims[0] = 3; }, ACLNN_ERR_PARAM_INVALID,
               "gradAlpha: expected rank 1"),
      rejected(o + "_output_rank_after_input_ranks", op,
               [](LayerCase& c) { add_rank(c.slot("gradX")); add_rank(c.slot("normOut")); }, ACLNN_ERR_PARAM_INVALID,
               "normOut: expected rank 4, got rank 5"),
      rejected(o + "_shape_before_dtype", op,
               [](LayerCase& c) { c.slot("gradBias").dims[0] = 3; c.slot("x").dtype = ACL_INT8; },
               ACLNN_ERR_PARAM_INVALID, "gradBias: expected [F]=[24]"),
      rejected(o + "_dtype_before_format", op,
               [](LayerCase& c) { c.slot("gradHRes").dtype = ACL_BF16; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "gradHRes: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_output_format_is_checked", op, [](LayerCase& c) { c.slot("gradPhi").format = ACL_FORMAT_NC1HWC0; },
               ACLNN_ERR_PARAM_INVALID, "gradPhi: private format ACL_FORMAT_NC1HWC0"),
      // hcEps is not checked (the C++ API checks it: no reference here).
      runs(o + "_hcEps_inf", op, [](LayerCase& c) { c.hc_eps = std::numeric_limits<double>::infinity(); }),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_gradPhi_overlaps_phi") r.after = [](LayerCase& c) { c.alias("gradPhi", "phi"); };
  }
  return rows;
}

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (Op op : kOps) {
    std::vector<Row> c = common_rows(op);
    rows.insert(rows.end(), c.begin(), c.end());
  }
  for (const auto& more : {sinkhorn_rows(), sinkhorn_backward_rows(), post_rows(), post_backward_rows(),
                           pre_sinkhorn_rows(), pre_sinkhorn_backward_rows()})
    rows.insert(rows.end(), more.begin(), more.end());
  return rows;
}

class LayerOperators : public ::testing::TestWithParam<Row> {};

TEST_P(LayerOperators, Call) {
  const Row& row = GetParam();
  LayerCase c(row.op, row.config);
  row.mutate(c);
  c.materialize();
  if (row.after) row.after(c);
  reset_recent_error();
  const aclnnStatus status = c.get_workspace(row.null_workspace_size, row.null_executor);
  const std::string message = aclGetRecentErrMsg();

  if (row.outcome == Outcome::rejected) {
    EXPECT_EQ(status, row.code) << message;
    EXPECT_NE(message.find(std::string(op_name(row.op)) + "GetWorkspaceSize: "), std::string::npos) << message;
    EXPECT_NE(message.find(row.message), std::string::npos) << "expected \"" << row.message << "\" in: " << message;
    EXPECT_EQ(c.executor, kExecutorSentinel);
    EXPECT_EQ(c.workspace_size, kWorkspaceSentinel);
    EXPECT_TRUE(c.outputs_untouched());
    return;
  }
  ASSERT_EQ(status, ACLNN_SUCCESS) << message;
  ASSERT_NE(c.executor, kExecutorSentinel);
  if (row.outcome == Outcome::nothing_run) {
    EXPECT_EQ(c.workspace_size, 0u);
    EXPECT_EQ(c.run(nullptr, 0), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_TRUE(c.outputs_untouched());
    return;
  }
  if (row.outcome == Outcome::runs) {
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (const Slot& s : c.slots())
      if (s.output && s.present) EXPECT_FALSE(c.untouched(s.name)) << s.name << " was not written";
    return;
  }
  std::map<std::string, std::vector<uint8_t>> expected;
  const mhc::Status reference = c.reference(&expected);
  ASSERT_TRUE(reference.ok()) << reference.message();
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  for (const Slot& s : c.slots()) {
    if (!s.output || !s.present) continue;
    const auto it = expected.find(s.name);
    if (it == expected.end()) {
      EXPECT_TRUE(c.untouched(s.name)) << s.name << " is not the face's to write";
      continue;
    }
    EXPECT_EQ(c.logical_bytes(s.name), it->second) << s.name << " differs from the C++ API's";
    EXPECT_TRUE(c.gaps_untouched(s.name)) << s.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Aclnn, LayerOperators, ::testing::ValuesIn(all_rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.label; });

// ---------------------------------------------------------------- lifecycle

// An executor runs once and only as its own operator; the aclTensors may be
// destroyed before the run; a failed run check leaves the executor live.
TEST(AclnnLayerLifecycle, AnExecutorRunsOnceAsItsOwnOperator) {
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    LayerCase c(op, Config{});
    c.materialize();
    std::map<std::string, std::vector<uint8_t>> expected;
    ASSERT_TRUE(c.reference(&expected).ok());
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    c.destroy_tensors();
    const Op other = op == Op::post ? Op::sinkhorn : Op::post;
    EXPECT_EQ(c.run_as(other, nullptr, 0), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find(std::string("executor belongs to ") + op_name(op)),
              std::string::npos)
        << aclGetRecentErrMsg();
    if (c.workspace_size > 0) {
      EXPECT_EQ(c.run(nullptr, c.workspace_size), ACLNN_ERR_PARAM_NULLPTR);
      std::vector<uint8_t> small(c.workspace_size - 1);
      EXPECT_EQ(c.run(small.data(), small.size()), ACLNN_ERR_PARAM_INVALID);
    }
    aclrtStream dead = nullptr;
    ASSERT_EQ(aclrtCreateStream(&dead), ACL_SUCCESS);
    ASSERT_EQ(aclrtDestroyStream(dead), ACL_SUCCESS);
    std::vector<uint8_t> workspace(c.workspace_size);
    EXPECT_EQ(c.run(workspace.data(), workspace.size(), dead), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("stream is not live"), std::string::npos);
    aclOpExecutor* const live = c.executor;
    c.executor = nullptr;
    EXPECT_EQ(c.run(nullptr, 0), ACLNN_ERR_PARAM_NULLPTR);
    c.executor = live;
    EXPECT_TRUE(c.outputs_untouched());
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (const auto& [name, bytes] : expected) EXPECT_EQ(c.logical_bytes(name), bytes) << name;
    EXPECT_EQ(c.run(), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("an executor runs once"), std::string::npos);
    EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_ERR_PARAM_INVALID);
    c.executor = kExecutorSentinel;
  }
}

// The executors of CANN's empty cases run nothing, once, on any stream; one
// that is not run can be destroyed.
TEST(AclnnLayerLifecycle, EmptyCallsRunNothingOnce) {
  for (Op op : {Op::sinkhorn_backward, Op::post, Op::pre_sinkhorn, Op::pre_sinkhorn_backward}) {
    SCOPED_TRACE(op_name(op));
    aclrtStream stream = nullptr;
    ASSERT_EQ(aclrtCreateStream(&stream), ACL_SUCCESS);
    LayerCase c(op, Config{});
    if (op == Op::sinkhorn_backward) {
      c.slot("gradOutput").dims[0] = 0;
      c.slot("out").dims[0] = 0;
    } else {
      empty_tokens(c);
    }
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.workspace_size, 0u);
    EXPECT_EQ(c.run(nullptr, 0, stream), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.run(nullptr, 0, stream), ACLNN_ERR_PARAM_INVALID);
    c.executor = kExecutorSentinel;
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
    EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_SUCCESS);
    c.executor = kExecutorSentinel;
    EXPECT_TRUE(c.outputs_untouched());
    EXPECT_EQ(aclrtDestroyStream(stream), ACL_SUCCESS);
  }
}

// The layer end to end through the face, as a CANN program chains it: the
// backward's caches are the forward's outputs, and the fused pair equals the
// unfused chain (MhcPre's face, then MhcSinkhorn's) bit for bit.
TEST(AclnnLayerChain, SinkhornBackwardReadsTheForwardsCaches) {
  Config config;
  config.lead = {2, 3};
  config.N = 6;
  LayerCase forward(Op::sinkhorn, config);
  forward.materialize();
  ASSERT_EQ(forward.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(forward.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();

  LayerCase backward(Op::sinkhorn_backward, config);
  backward.materialize();
  for (const char* name : {"normOut", "sumOut"}) {  // the forward's caches as the backward's inputs
    Slot& s = backward.slot(name);
    const std::vector<uint8_t> bytes = forward.logical_bytes(name);
    ASSERT_EQ(bytes.size(), s.storage.size());
    std::memcpy(s.storage.data(), bytes.data(), bytes.size());  // the aclTensor points at this storage
  }
  std::map<std::string, std::vector<uint8_t>> expected;
  ASSERT_TRUE(backward.reference(&expected).ok());
  ASSERT_EQ(backward.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(backward.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(backward.logical_bytes("out"), expected["out"]);
  // From z alone (the C++ API's recompute) gives the same bits as from the caches.
  std::vector<uint8_t> z = forward.logical_bytes("x"), g = backward.logical_bytes("gradOutput");
  std::vector<uint8_t> grad_z(z.size(), 0);
  const std::vector<int64_t> dims = forward.slot("x").dims;
  mhc::SinkhornBackwardInputs in;
  in.grad_h_res = view_of(g, ACL_FLOAT, dims);
  in.z = view_of(z, ACL_FLOAT, dims);
  in.eps = forward.eps;
  in.num_iters = forward.num_iters;
  ASSERT_TRUE(mhc::sinkhorn_backward(in, {view_of(grad_z, ACL_FLOAT, dims)}).ok());
  EXPECT_EQ(backward.logical_bytes("out"), grad_z);
}

}  // namespace
}  // namespace aclnn_layer_test
