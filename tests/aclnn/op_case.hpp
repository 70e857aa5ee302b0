// Test fixture for the aclnn face: one operator call described as named
// tensor slots (CANN's parameter names), each with its dims, dtype, format,
// strides and offset, materialised into host storage and aclTensors. Tests
// mutate slots, call the two phases and inspect codes, messages and memory.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnnop/aclnn_mhc_pre_backward_v2.h"
#include "aclnnop/aclnn_mhc_pre_v2.h"

namespace aclnn_test {

enum class Op { pre, pre_v2, backward, backward_v2 };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::pre: return "aclnnMhcPre";
    case Op::pre_v2: return "aclnnMhcPreV2";
    case Op::backward: return "aclnnMhcPreBackward";
    case Op::backward_v2: return "aclnnMhcPreBackwardV2";
  }
  return "";
}
inline bool is_forward(Op op) { return op == Op::pre || op == Op::pre_v2; }
inline bool is_v2(Op op) { return op == Op::pre_v2 || op == Op::backward_v2; }

// MHC_NUM_THREADS set for a scope (a call's default thread count), then put back.
class ScopedThreadCount {
 public:
  ScopedThreadCount() {
    if (const char* value = std::getenv("MHC_NUM_THREADS")) saved_ = value;
  }
  ~ScopedThreadCount() {
    if (saved_) setenv("MHC_NUM_THREADS", saved_->c_str(), 1);
    else unsetenv("MHC_NUM_THREADS");
  }
  ScopedThreadCount(const ScopedThreadCount&) = delete;
  ScopedThreadCount& operator=(const ScopedThreadCount&) = delete;
  void set(const char* count) const { setenv("MHC_NUM_THREADS", count, 1); }

 private:
  std::optional<std::string> saved_;
};

// Byte written over every output before a call: "untouched" means still this.
constexpr uint8_t kPattern = 0xA5;
inline aclOpExecutor* const kExecutorSentinel = reinterpret_cast<aclOpExecutor*>(uintptr_t(0x5E5E5E40));
constexpr uint64_t kWorkspaceSentinel = 0xDEADBEEFull;

struct Config {
  int64_t T = 5, N = 4, D = 8;
  bool gamma = true;
  bool optional_extras = true;  // forward: the caches; backward: gradXPost
  bool two_entry_alpha = false;
  aclDataType x_dtype = ACL_BF16;
};

struct Slot {
  std::string name;
  aclDataType dtype = ACL_FLOAT;
  std::vector<int64_t> dims;
  bool output = false;
  bool present = true;      // false: the argument is NULL
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> strides;  // elements; empty: contiguous
  int64_t offset = 0;            // elements
  bool null_data = false;
  int64_t declared_storage_delta = 0;  // storage declared to aclCreateTensor vs. what the view needs
  float center = 0.0f, scale = 1.0f;  // input values: center + scale * u, u in [-1, 1]

  std::vector<uint8_t> storage;
  aclTensor* tensor = nullptr;

  size_t element_size() const {
    switch (dtype) {
      case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
      case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
      case ACL_DOUBLE: case ACL_INT64: case ACL_UINT64: return 8;
      default: return 4;
    }
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  std::vector<int64_t> effective_strides() const {
    if (!strides.empty()) return strides;
    std::vector<int64_t> s(dims.size(), 1);
    for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
    return s;
  }
  // Storage element index of the element with row-major logical index `linear`.
  int64_t storage_index(int64_t linear) const {
    const std::vector<int64_t> s = effective_strides();
    int64_t index = offset;
    for (size_t i = dims.size(); i-- > 0;) {
      index += (linear % dims[i]) * s[i];
      linear /= dims[i];
    }
    return index;
  }
  int64_t storage_elements() const { return numel() == 0 ? offset + 1 : max_index() + 1; }
  int64_t max_index() const {
    const std::vector<int64_t> s = effective_strides();
    int64_t m = offset;
    for (size_t i = 0; i < dims.size(); ++i) m += (dims[i] - 1) * s[i];
    return m;
  }
  // The elements' bytes in row-major logical order, whatever the layout.
  std::vector<uint8_t> logical_bytes() const;
  // No byte of the storage outside the elements changed from kPattern.
  bool gaps_untouched() const;
};

Slot make_slot(const std::string& name, aclDataType dtype, std::vector<int64_t> dims, bool output,
               bool present = true, float center = 0.0f, float scale = 1.0f);
// A value in [-1, 1] from a seed and an element index.
float unit_value(uint32_t seed, int64_t i);
// `value` stored as `dtype` (bf16 and fp16 rounded to nearest even, as the library rounds).
void store_value(aclDataType dtype, uint8_t* dst, float value);

class OpCase {
 public:
  explicit OpCase(Op op, Config config = {});
  ~OpCase();
  OpCase(const OpCase&) = delete;
  OpCase& operator=(const OpCase&) = delete;

  Op op() const { return op_; }
  const Config& config() const { return config_; }
  Slot& slot(const std::string& name);
  std::vector<Slot>& slots() { return slots_; }

  // Storage and aclTensors from the slots: inputs get deterministic values
  // (by logical index, so any layout holds the same numbers), outputs and
  // the gaps between elements get kPattern.
  void materialize();
  // Phase 1. Null pointers for the result arguments on request.
  aclnnStatus get_workspace(int64_t op_impl_mode = 0, bool null_workspace_size = false,
                            bool null_executor = false);
  // Phase 2 with the given workspace, or with a fresh one of the asked size.
  aclnnStatus run(void* workspace, uint64_t workspace_size, aclrtStream stream = nullptr);
  aclnnStatus run();
  void destroy_tensors();

  // Every byte of every output's storage (elements and gaps) is kPattern.
  bool outputs_untouched() const;
  // The storage (elements and gaps) of every output given, in slot order.
  std::vector<std::vector<uint8_t>> output_storage() const;
  // The logical (row-major) bytes of a slot, gathered through its strides.
  std::vector<uint8_t> logical_bytes(const std::string& name) const;
  // Bytes of the storage of `name` that are not elements of its view all still kPattern.
  bool gaps_untouched(const std::string& name) const;

  uint64_t workspace_size = kWorkspaceSentinel;
  aclOpExecutor* executor = kExecutorSentinel;
  double norm_eps = 1e-6;
  double hc_eps = 1e-6;

 private:
  aclTensor* arg(const std::string& name);
  Op op_;
  Config config_;
  std::vector<Slot> slots_;
  std::vector<uint8_t> workspace_;
};

// Sets a message no operator would give, so a test can see that a call set its own.
inline void reset_recent_error() {
  char byte = 0;
  (void)aclrtMemcpy(&byte, 0, &byte, 1, ACL_MEMCPY_HOST_TO_HOST);
}

}  // namespace aclnn_test
