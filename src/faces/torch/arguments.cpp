// The engines' torch ops' argument checks (arguments.hpp).
#include "faces/torch/arguments.hpp"

#include <cmath>
#include <string>

#include "mhc/mhc.h"

namespace mhc::torch_face {
namespace {

void check_defined(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.defined(), name, ": expected a tensor, got None");
}

std::string dims(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
  return s + "]";
}

}  // namespace

Streams streams(const Tensor& t, const char* name) {
  check_defined(t, name);
  TORCH_CHECK_VALUE(t.dim() >= 2, name, ": expected [..., N, D], got ", dims(t.sizes()));
  const at::ScalarType type = t.scalar_type();
  TORCH_CHECK_TYPE(type == at::kBFloat16 || type == at::kHalf || type == at::kFloat, name,
                   ": expected dtype bf16, fp16 or fp32, got ", type);
  Streams s;
  s.N = t.size(-2);
  s.D = t.size(-1);
  TORCH_CHECK_VALUE(s.N >= 1 && s.D >= 1, name, ": expected N >= 1 and D >= 1 in [..., N, D], got ",
                    dims(t.sizes()));
  int64_t elements = 1;
  for (int64_t extent : t.sizes())
    TORCH_CHECK_VALUE(!__builtin_mul_overflow(elements, extent, &elements) && elements <= MHC_MAX_ELEMENTS, name,
                      ": expected at most 2^44 elements, got ", dims(t.sizes()));
  s.lead.assign(t.sizes().begin(), t.sizes().end() - 2);
  s.T = elements / (s.N * s.D);
  s.flat = t.dim() == 3 ? t : t.reshape({s.T, s.N, s.D});
  return s;
}

Tensor per_token(const Tensor& t, const char* name, int64_t T, std::initializer_list<int64_t> inner,
                 bool squeeze_unit) {
  check_defined(t, name);
  const int64_t rank = int64_t(inner.size());
  Tensor u = squeeze_unit && t.dim() >= rank + 1 && t.size(-1) == 1 ? t.squeeze(-1) : t;
  bool fits = u.dim() >= rank;
  int64_t tokens = 1;
  for (int64_t i = 0; fits && i < u.dim() - rank; ++i) tokens *= u.size(i);
  for (int64_t i = 0; fits && i < rank; ++i) fits = u.size(u.dim() - rank + i) == inner.begin()[i];
  std::string expected = "[..";
  for (int64_t extent : inner) expected += "," + std::to_string(extent);
  TORCH_CHECK_VALUE(fits && tokens == T, name, ": expected ", expected, "] over the streams' ", T, " tokens, got ",
                    dims(t.sizes()));
  std::vector<int64_t> flat{T};
  flat.insert(flat.end(), inner);
  return u.dim() == rank + 1 ? u : u.reshape(flat);
}

void check_shape(const Tensor& t, const char* name, std::initializer_list<int64_t> shape) {
  check_defined(t, name);
  TORCH_CHECK_VALUE(t.sizes().equals(shape), name, ": expected ", dims(shape), ", got ", dims(t.sizes()));
}

void check_entries(const Tensor& t, const char* name, int64_t entries) {
  check_defined(t, name);
  TORCH_CHECK_VALUE(t.numel() == entries && t.dim() <= 1, name, ": expected ", entries,
                    entries == 1 ? " entry (0-d or [1])" : " entries", ", got ", dims(t.sizes()));
}

void check_eps(const char* name, double value) {
  TORCH_CHECK_VALUE(std::isfinite(value) && value >= 0, name, ": expected a finite value >= 0, got ", value);
}

void check_finite(const char* name, double value) {
  TORCH_CHECK_VALUE(std::isfinite(value), name, ": expected a finite value, got ", value);
}

void check_devices(const Tensor& x, const char* x_name,
                   std::initializer_list<std::pair<const Tensor*, const char*>> others) {
  for (const auto& [t, name] : others) {
    if (t == nullptr || !t->defined() || t->is_meta() == x.is_meta()) continue;
    if (x.is_meta())
      TORCH_CHECK_VALUE(false, x_name, ": expected a CPU tensor, got device meta (with meta tensors, every input is one; ",
                        name, " is on ", t->device(), ")");
    TORCH_CHECK_VALUE(false, name, ": expected a CPU tensor, got device ", t->device());
  }
}

TensorView view_of(const Tensor& t, const char* name) {
  check_defined(t, name);
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": expected a CPU tensor, got device ", t.device());
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, name, ": expected a dense (strided) tensor");
  TORCH_CHECK_VALUE(t.dim() <= kMaxRank, name, ": rank ", t.dim(), " exceeds the maximum ", kMaxRank);
  TensorView v;
  switch (t.scalar_type()) {
    case at::kBFloat16: v.dtype = DType::bf16; break;
    case at::kHalf: v.dtype = DType::fp16; break;
    case at::kFloat: v.dtype = DType::fp32; break;
    default: TORCH_CHECK_TYPE(false, name, ": expected dtype bf16, fp16 or fp32, got ", t.scalar_type());
  }
  v.data = t.data_ptr();
  v.rank = int32_t(t.dim());
  for (int i = 0; i < v.rank; ++i) v.shape[i] = t.size(i), v.strides[i] = t.stride(i);
  return v;
}

std::optional<TensorView> view_of(const c10::optional<Tensor>& t, const char* name) {
  if (!t.has_value()) return std::nullopt;
  return view_of(*t, name);
}

void raise_on_error(const Status& s, Renames renames) {
  if (s.ok()) return;
  std::string message = s.message();
  const size_t colon = message.find(':');
  for (const auto& [ours, theirs] : renames)
    if (colon != std::string::npos && message.compare(0, colon, ours) == 0) {
      message = theirs + message.substr(colon);
      break;
    }
  TORCH_CHECK_TYPE(s.kind() != ErrorKind::dtype, message);
  TORCH_CHECK_VALUE(false, message);
}

}  // namespace mhc::torch_face
