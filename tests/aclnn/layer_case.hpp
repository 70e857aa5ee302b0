// The fixture of the aclnn face tests of the layer operators
// (test_layer_operators.cpp): one call of aclnnMhcSinkhorn, aclnnMhcPost,
// aclnnMhcPreSinkhorn or one of their backwards, described as named tensor
// slots (CANN's parameter names) with deterministic inputs (LayerCase), the
// C++ API's outputs on the same inputs (reference), and the table's rows (Row)
// with the builders and rules every operator shares (layer_case.cpp). Each
// operator's own rows are in layer_rows_*.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_post.h"
#include "aclnnop/aclnn_mhc_post_backward.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "mhc/mhc.hpp"
#include "op_case.hpp"     // Slot, kPattern, the result sentinels, reset_recent_error, ScopedThreadCount

namespace aclnn_layer_test {

using aclnn_test::kExecutorSentinel;
using aclnn_test::kPattern;
using aclnn_test::kWorkspaceSentinel;
using aclnn_test::reset_recent_error;
using aclnn_test::ScopedThreadCount;
using aclnn_test::Slot;

enum class Op { sinkhorn, sinkhorn_backward, post, post_backward, pre_sinkhorn, pre_sinkhorn_backward };

const char* op_name(Op op);
const Op kOps[] = {Op::sinkhorn, Op::sinkhorn_backward, Op::post, Op::post_backward, Op::pre_sinkhorn,
                   Op::pre_sinkhorn_backward};

struct Config {
  std::vector<int64_t> lead = {5};  // the token dims: {T} or {B, S}
  int64_t N = 4, D = 8, I = 3;      // I: the Sinkhorn's iterations
  aclDataType x_dtype = ACL_BF16;
  bool optional = true;  // sinkhorn: the caches; post (backward): hRes; pre sinkhorn: needBackward
};

int64_t product(const std::vector<int64_t>& dims);
int64_t pitch_of(int64_t N);  // Na (SPEC §10)
std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b);

using aclnn_test::make_slot;

// `count` values center + scale * u, u in [-1, 1] from the name and the
// element index, stored as `dtype`: a slot holds the same numbers whatever
// its layout and whatever the other slots.
std::vector<uint8_t> random_bytes(const std::string& seed_name, aclDataType dtype, int64_t count, float center,
                                  float scale);

// A contiguous C++ API view of `dims` over `bytes`.
mhc::TensorView view_of(std::vector<uint8_t>& bytes, aclDataType dtype, const std::vector<int64_t>& dims);

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
  std::vector<uint8_t> logical_bytes(const std::string& name) const { return slot(name).logical_bytes(); }
  bool gaps_untouched(const std::string& name) const { return slot(name).gaps_untouched(); }


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

void PrintTo(const Row& row, std::ostream* os);

void drop(Slot& s);
void add_rank(Slot& s);
// Every dim padded by one element, and an offset: a non-contiguous view.
void pad(Slot& s, int64_t offset);

Row rejected(std::string label, Op op, std::function<void(LayerCase&)> mutate, aclnnStatus code,
             std::string message = "", Config config = {});
Row computed(std::string label, Op op, std::function<void(LayerCase&)> mutate = [](LayerCase&) {},
             Config config = {});
Row nothing_run(std::string label, Op op, std::function<void(LayerCase&)> mutate, Config config = {});
Row runs(std::string label, Op op, std::function<void(LayerCase&)> mutate);

// The names of the slots `op` passes (not NULL) under `config`.
std::vector<std::string> slot_names(Op op, Config config = {});

// Rules every operator has: one row per rule and tensor.
std::vector<Row> common_rows(Op op);
// x-typed operators: fp16 too, fp32 x rejected as CANN rejects it.
std::vector<Row> x_dtype_rows(Op op, const std::string& x_name);
// T = 0 in every slot but phi, alpha, bias and their gradients.
void empty_tokens(LayerCase& c);

// Each operator's own rules (layer_rows_sinkhorn.cpp, layer_rows_post.cpp,
// layer_rows_pre_sinkhorn.cpp).
std::vector<Row> sinkhorn_rows();
std::vector<Row> sinkhorn_backward_rows();
std::vector<Row> post_rows();
std::vector<Row> post_backward_rows();
std::vector<Row> pre_sinkhorn_rows();
std::vector<Row> pre_sinkhorn_backward_rows();

}  // namespace aclnn_layer_test
