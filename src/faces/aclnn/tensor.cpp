// aclTensor: CANN's tensor descriptor, and its translation to mhc::TensorView.
#include <algorithm>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "faces/aclnn/face.hpp"

namespace mhc::faces::aclnn {
namespace {

struct Tensor {
  std::vector<int64_t> view_dims;
  std::vector<int64_t> strides;  // elements
  std::vector<int64_t> storage_dims;
  bool has_storage = false;
  int32_t dtype = ACL_DT_UNDEFINED;  // aclDataType, as passed (any int)
  int32_t format = ACL_FORMAT_ND;    // aclFormat, as passed (any int)
  int64_t offset = 0;  // elements
  void* data = nullptr;
};

HandleRegistry<Tensor>& tensors() {
  static HandleRegistry<Tensor> registry;
  return registry;
}

bool to_mhc_dtype(int32_t dtype, DType* out) {
  switch (dtype) {
    case ACL_BF16: *out = DType::bf16; return true;
    case ACL_FLOAT16: *out = DType::fp16; return true;
    case ACL_FLOAT: *out = DType::fp32; return true;
    default: return false;
  }
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  return n;
}

// Elements of the declared storage; -1 when the dims are no storage at all (a
// negative dim, or a count past 64 bits). A zero dim anywhere makes it empty.
int64_t storage_elements(const std::vector<int64_t>& dims) {
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) return -1;
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; })) return 0;
  int64_t n = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// The view's element range [lo, hi] (relative to the storage base) must lie in
// the storage the caller declared: a view outside it would read or write
// memory the tensor does not own.
bool view_inside_storage(const Tensor& t) {
  int64_t lo = t.offset, hi = t.offset;
  for (size_t i = 0; i < t.view_dims.size(); ++i) {
    int64_t span;
    if (__builtin_mul_overflow(t.view_dims[i] - 1, t.strides[i], &span)) return false;
    if (__builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi)) return false;
  }
  return lo >= 0 && hi < storage_elements(t.storage_dims);
}

}  // namespace

bool tensor_info(const aclTensor* tensor, TensorInfo* info) {
  std::shared_ptr<Tensor> t = tensors().find(handle_id(tensor));
  if (!t) return false;
  info->dims = t->view_dims;
  info->dtype = t->dtype;
  info->format = t->format;
  return true;
}

bool tensor_is_live(const aclTensor* tensor) { return tensors().contains(handle_id(tensor)); }

bool tensors_are_live(std::span<const aclTensor* const> list) { return tensors().contains_all(list); }

aclnnStatus to_view(const char* op, const TensorArg& arg, TensorView* view) {
  // The message's prefix, built only for a message (every call converts every tensor).
  const auto where = [&] { return std::string(op) + ": " + arg.name; };
  std::shared_ptr<Tensor> t = tensors().find(handle_id(arg.tensor));
  if (!t) return fail(ACLNN_ERR_PARAM_INVALID, where() + ": not a live aclTensor (destroyed or never created)");
  DType dtype;
  if (!to_mhc_dtype(t->dtype, &dtype))
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": aclDataType " + std::to_string(int(t->dtype)) +
                                             " is not supported (ACL_BF16, ACL_FLOAT16 or ACL_FLOAT)");
  if (const char* name = private_format_name(t->format))
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": private format " + name + " is not supported (use ACL_FORMAT_ND)");
  if (!is_plain_format(t->format))
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": unknown aclFormat " + std::to_string(int(t->format)));
  if (t->view_dims.size() > size_t(kMaxRank))
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": rank " + std::to_string(t->view_dims.size()) +
                                             " exceeds " + std::to_string(kMaxRank));
  if (product(t->view_dims) == 0)
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": empty tensor " + dims_text(t->view_dims) + " is not supported");
  if (t->offset < 0)
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": negative offset " + std::to_string(t->offset));
  if (t->has_storage && storage_elements(t->storage_dims) < 0)
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": storage dims " + dims_text(t->storage_dims) +
                                             " are negative or their element count overflows 64 bits");
  int64_t offset_bytes;  // checked even without storage dims: the pointer arithmetic must not overflow
  if (__builtin_mul_overflow(t->offset, core::element_size(dtype), &offset_bytes) ||
      (t->data != nullptr && uint64_t(offset_bytes) > UINTPTR_MAX - reinterpret_cast<uintptr_t>(t->data)))
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": offset " + std::to_string(t->offset) +
                                             " elements overflows the address space");
  if (t->has_storage && !view_inside_storage(*t))
    return fail(ACLNN_ERR_PARAM_INVALID, where() + ": view " + dims_text(t->view_dims) + " with strides " +
                                             dims_text(t->strides) + " and offset " + std::to_string(t->offset) +
                                             " reaches outside its storage " + dims_text(t->storage_dims));
  TensorView v;
  v.dtype = dtype;
  v.rank = int32_t(t->view_dims.size());
  std::copy(t->view_dims.begin(), t->view_dims.end(), v.shape.begin());
  std::copy(t->strides.begin(), t->strides.end(), v.strides.begin());
  // NULL data stays NULL so validation reports it by name.
  v.data = t->data == nullptr ? nullptr : static_cast<char*>(t->data) + offset_bytes;
  *view = v;
  return ACLNN_SUCCESS;
}

aclnnStatus to_optional_view(const char* op, const TensorArg& arg, std::optional<TensorView>* view) {
  view->reset();
  if (arg.tensor == nullptr) return ACLNN_SUCCESS;
  TensorView v;
  if (aclnnStatus s = to_view(op, arg, &v); s != ACLNN_SUCCESS) return s;
  *view = v;
  return ACLNN_SUCCESS;
}

}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat format,
                           const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
  try {
    if (viewDims == nullptr && viewDimsNum != 0) {
      set_recent_error("aclCreateTensor: viewDims is NULL with viewDimsNum " + std::to_string(viewDimsNum));
      return nullptr;
    }
    if (storageDims == nullptr && storageDimsNum != 0) {
      set_recent_error("aclCreateTensor: storageDims is NULL with storageDimsNum " + std::to_string(storageDimsNum));
      return nullptr;
    }
    auto t = std::make_shared<Tensor>();
    t->view_dims.assign(viewDims, viewDims + viewDimsNum);
    if (std::any_of(t->view_dims.begin(), t->view_dims.end(), [](int64_t d) { return d < 0; })) {
      set_recent_error("aclCreateTensor: negative dim in viewDims " + dims_text(t->view_dims));
      return nullptr;
    }
    if (stride != nullptr) {
      t->strides.assign(stride, stride + viewDimsNum);
    } else {  // no strides given: contiguous (saturated: such a view is rejected when used)
      t->strides.assign(viewDimsNum, 1);
      for (size_t i = viewDimsNum; i-- > 1;)
        if (__builtin_mul_overflow(t->strides[i], t->view_dims[i], &t->strides[i - 1])) t->strides[i - 1] = INT64_MAX;
    }
    t->has_storage = storageDims != nullptr && storageDimsNum > 0;
    if (t->has_storage) t->storage_dims.assign(storageDims, storageDims + storageDimsNum);
    t->dtype = enum_value(dataType);
    t->format = enum_value(format);
    t->offset = offset;
    t->data = tensorData;
    return as_handle<aclTensor>(tensors().add(std::move(t)));
  } catch (const std::exception&) {
    set_recent_error("aclCreateTensor: out of host memory");
    return nullptr;
  }
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  if (tensor == nullptr) return ACLNN_SUCCESS;
  if (tensors().take(handle_id(tensor)) == nullptr)
    return fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyTensor: not a live aclTensor (destroyed twice or never created)");
  return ACLNN_SUCCESS;
}

}  // extern "C"
