#include "op_case.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "core/dtype.hpp"  // inputs rounded to fp16 as the library rounds (any compiler)

namespace aclnn_test {

Slot make_slot(const std::string& name, aclDataType dtype, std::vector<int64_t> dims, bool output, bool present,
               float center, float scale) {
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

float unit_value(uint32_t seed, int64_t i) {
  uint32_t h = uint32_t(i) * 2654435761u ^ (seed * 40503u + 0x9E3779B9u);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return float(h % 2001u) / 1000.0f - 1.0f;
}

void store_value(aclDataType dtype, uint8_t* dst, float value) {
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
    case ACL_FLOAT16: { const uint16_t h = mhc::core::float_to_fp16(value); std::memcpy(dst, &h, 2); break; }
    default: break;  // dtypes the operators reject: the content does not matter
  }
}

std::vector<uint8_t> Slot::logical_bytes() const {
  const size_t es = element_size();
  std::vector<uint8_t> out(size_t(numel()) * es);
  for (int64_t i = 0; i < numel(); ++i) std::memcpy(out.data() + i * es, storage.data() + storage_index(i) * es, es);
  return out;
}

bool Slot::gaps_untouched() const {
  const size_t es = element_size();
  std::vector<bool> element(storage.size(), false);
  for (int64_t i = 0; i < numel(); ++i)
    for (size_t b = 0; b < es; ++b) element[storage_index(i) * es + b] = true;
  for (size_t b = 0; b < storage.size(); ++b)
    if (!element[b] && storage[b] != kPattern) return false;
  return true;
}

OpCase::OpCase(Op op, Config c) : op_(op), config_(c) {
  const int64_t T = c.T, N = c.N, D = c.D, K = N * D;
  const int64_t F = c.two_entry_alpha ? 2 * N : 2 * N + N * N, A = c.two_entry_alpha ? 2 : 3;
  const aclDataType xt = c.x_dtype;
  auto& s = slots_;
  s.push_back(make_slot("x", xt, {T, N, D}, false));
  s.push_back(make_slot("phi", ACL_FLOAT, {F, K}, false, true, 0.0f, 0.05f));
  s.push_back(make_slot("alpha", ACL_FLOAT, {A}, false, true, 1.0f, 0.3f));
  if (is_forward(op)) {
    s.push_back(make_slot("bias", ACL_FLOAT, {F}, false, true, 0.0f, 0.1f));
    s.push_back(make_slot("gamma", ACL_FLOAT, {N, D}, false, c.gamma, 1.0f, 0.1f));
    s.push_back(make_slot("hIn", xt, {T, D}, true));
    s.push_back(make_slot("hPost", ACL_FLOAT, {T, N}, true));
    s.push_back(make_slot("hRes", ACL_FLOAT, {T, N, N}, true, !c.two_entry_alpha));
    s.push_back(make_slot("invRms", ACL_FLOAT, {T}, true, c.optional_extras));
    s.push_back(make_slot("hMix", ACL_FLOAT, {T, F}, true, c.optional_extras));
    s.push_back(make_slot("hPre", ACL_FLOAT, {T, N}, true, c.optional_extras));
  } else {
    s.push_back(make_slot("gradHIn", xt, {T, D}, false));
    s.push_back(make_slot("gradHPost", ACL_FLOAT, {T, N}, false));
    s.push_back(make_slot("gradHRes", ACL_FLOAT, {T, N, N}, false, !c.two_entry_alpha));
    s.push_back(make_slot("invRms", ACL_FLOAT, {T}, false, true, 0.8f, 0.1f));
    s.push_back(make_slot("hMix", ACL_FLOAT, {T, F}, false, true, 0.0f, 0.5f));
    s.push_back(make_slot("hPre", ACL_FLOAT, {T, N}, false, true, 0.5f, 0.4f));
    s.push_back(make_slot("hPost", ACL_FLOAT, {T, N}, false, true, 1.0f, 0.8f));
    s.push_back(make_slot("gamma", ACL_FLOAT, {N, D}, false, c.gamma, 1.0f, 0.1f));
    s.push_back(make_slot("gradXPost", xt, {T, N, D}, false, c.optional_extras, 0.0f, 0.5f));
    s.push_back(make_slot("gradX", xt, {T, N, D}, true));
    s.push_back(make_slot("gradPhi", ACL_FLOAT, {F, K}, true));
    s.push_back(make_slot("gradAlpha", ACL_FLOAT, {A}, true));
    s.push_back(make_slot("gradBias", ACL_FLOAT, {F}, true));
    s.push_back(make_slot("gradGamma", ACL_FLOAT, {N, D}, true, c.gamma));
  }
}

OpCase::~OpCase() {
  destroy_tensors();
  if (executor != kExecutorSentinel) (void)aclDestroyAclOpExecutor(executor);  // may have run: ignored
}

Slot& OpCase::slot(const std::string& name) {
  for (Slot& s : slots_)
    if (s.name == name) return s;
  throw std::invalid_argument("no slot " + name);
}

void OpCase::materialize() {
  destroy_tensors();
  uint32_t seed = 1;
  for (Slot& s : slots_) {
    ++seed;
    if (!s.present) continue;
    const size_t es = s.element_size();
    s.storage.assign(size_t(s.storage_elements()) * es, kPattern);
    if (!s.output)
      for (int64_t i = 0; i < s.numel(); ++i)
        store_value(s.dtype, s.storage.data() + s.storage_index(i) * es, s.center + s.scale * unit_value(seed, i));
    const std::vector<int64_t> strides = s.effective_strides();
    const int64_t storage_dims[1] = {s.storage_elements() + s.declared_storage_delta};
    s.tensor = aclCreateTensor(s.dims.data(), s.dims.size(), s.dtype, strides.data(), s.offset, s.format,
                               storage_dims, 1, s.null_data ? nullptr : s.storage.data());
    if (s.tensor == nullptr) throw std::runtime_error("aclCreateTensor failed for " + s.name);
  }
}

void OpCase::destroy_tensors() {
  for (Slot& s : slots_) {
    if (s.tensor != nullptr) (void)aclDestroyTensor(s.tensor);
    s.tensor = nullptr;
  }
}

aclTensor* OpCase::arg(const std::string& name) { return slot(name).tensor; }

aclnnStatus OpCase::get_workspace(int64_t mode, bool null_workspace_size, bool null_executor) {
  uint64_t* ws = null_workspace_size ? nullptr : &workspace_size;
  aclOpExecutor** ex = null_executor ? nullptr : &executor;
  auto t = [this](const char* name) { return arg(name); };
  switch (op_) {
    case Op::pre:
      return aclnnMhcPreGetWorkspaceSize(t("x"), t("phi"), t("alpha"), t("bias"), t("gamma"), norm_eps, hc_eps,
                                         t("hIn"), t("hPost"), t("hRes"), t("invRms"), t("hMix"), t("hPre"), ws, ex);
    case Op::pre_v2:
      return aclnnMhcPreV2GetWorkspaceSize(t("x"), t("phi"), t("alpha"), t("bias"), t("gamma"), norm_eps, hc_eps,
                                           mode, t("hIn"), t("hPost"), t("hRes"), t("invRms"), t("hMix"),
                                           t("hPre"), ws, ex);
    case Op::backward:
      return aclnnMhcPreBackwardGetWorkspaceSize(
          t("x"), t("phi"), t("alpha"), t("gradHIn"), t("gradHPost"), t("gradHRes"), t("invRms"), t("hMix"),
          t("hPre"), t("hPost"), t("gamma"), t("gradXPost"), float(hc_eps), t("gradX"), t("gradPhi"),
          t("gradAlpha"), t("gradBias"), t("gradGamma"), ws, ex);
    case Op::backward_v2:
      return aclnnMhcPreBackwardV2GetWorkspaceSize(
          t("x"), t("phi"), t("alpha"), t("gradHIn"), t("gradHPost"), t("gradHRes"), t("invRms"), t("hMix"),
          t("hPre"), t("hPost"), t("gamma"), t("gradXPost"), float(hc_eps), mode, t("gradX"), t("gradPhi"),
          t("gradAlpha"), t("gradBias"), t("gradGamma"), ws, ex);
  }
  return -1;
}

aclnnStatus OpCase::run(void* workspace, uint64_t size, aclrtStream stream) {
  switch (op_) {
    case Op::pre: return aclnnMhcPre(workspace, size, executor, stream);
    case Op::pre_v2: return aclnnMhcPreV2(workspace, size, executor, stream);
    case Op::backward: return aclnnMhcPreBackward(workspace, size, executor, stream);
    case Op::backward_v2: return aclnnMhcPreBackwardV2(workspace, size, executor, stream);
  }
  return -1;
}

aclnnStatus OpCase::run() {
  workspace_.assign(workspace_size, 0);
  return run(workspace_size ? workspace_.data() : nullptr, workspace_size);
}

std::vector<std::vector<uint8_t>> OpCase::output_storage() const {
  std::vector<std::vector<uint8_t>> out;
  for (const Slot& s : slots_)
    if (s.output && s.present) out.push_back(s.storage);
  return out;
}

bool OpCase::outputs_untouched() const {
  for (const Slot& s : slots_)
    if (s.output && s.present)
      for (uint8_t b : s.storage)
        if (b != kPattern) return false;
  return true;
}

std::vector<uint8_t> OpCase::logical_bytes(const std::string& name) const {
  return const_cast<OpCase*>(this)->slot(name).logical_bytes();
}

bool OpCase::gaps_untouched(const std::string& name) const {
  return const_cast<OpCase*>(this)->slot(name).gaps_untouched();
}

}  // namespace aclnn_test
