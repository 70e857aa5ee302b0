// The first phase's checks (face.hpp): each reads a tensor's dims, dtype or
// format and, when it fails, records a message naming the tensor by CANN's
// parameter name and returns CANN's code. Also the layer operators' helpers:
// cache buffers as the core's views, and the core's messages in CANN's names.
#include <algorithm>
#include <cctype>
#include <string>

#include "faces/aclnn/face.hpp"

namespace mhc::faces::aclnn {
namespace {

int64_t saturated_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
int64_t saturated_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
int64_t saturated_factorial(int64_t n) {
  int64_t f = 1;
  for (int64_t i = 2; i <= n && f != INT64_MAX; ++i) f = saturated_mul(f, i);
  return f;
}

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case ACL_FLOAT: return "ACL_FLOAT";
    case ACL_FLOAT16: return "ACL_FLOAT16";
    case ACL_INT8: return "ACL_INT8";
    case ACL_INT32: return "ACL_INT32";
    case ACL_UINT8: return "ACL_UINT8";
    case ACL_INT16: return "ACL_INT16";
    case ACL_UINT16: return "ACL_UINT16";
    case ACL_UINT32: return "ACL_UINT32";
    case ACL_INT64: return "ACL_INT64";
    case ACL_UINT64: return "ACL_UINT64";
    case ACL_DOUBLE: return "ACL_DOUBLE";
    case ACL_BOOL: return "ACL_BOOL";
    case ACL_STRING: return "ACL_STRING";
    case ACL_COMPLEX64: return "ACL_COMPLEX64";
    case ACL_COMPLEX128: return "ACL_COMPLEX128";
    case ACL_BF16: return "ACL_BF16";
    default: return nullptr;
  }
}

const char* plain_format_name(int32_t format) {
  switch (format) {
    case ACL_FORMAT_NCHW: return "ACL_FORMAT_NCHW";
    case ACL_FORMAT_NHWC: return "ACL_FORMAT_NHWC";
    case ACL_FORMAT_ND: return "ACL_FORMAT_ND";
    case ACL_FORMAT_HWCN: return "ACL_FORMAT_HWCN";
    case ACL_FORMAT_NDHWC: return "ACL_FORMAT_NDHWC";
    case ACL_FORMAT_NCDHW: return "ACL_FORMAT_NCDHW";
    case ACL_FORMAT_NC: return "ACL_FORMAT_NC";
    case ACL_FORMAT_NCL: return "ACL_FORMAT_NCL";
    default: return nullptr;
  }
}

std::string format_text(int32_t format) {
  if (const char* name = plain_format_name(format)) return name;
  if (const char* name = private_format_name(format)) return name;
  return "aclFormat " + std::to_string(format);
}

}  // namespace

Shape named_shape(ops::NameList names, ops::DimList dims, const char* note) { return {dims, names, note}; }

std::string Shape::label() const {
  if (names.empty()) return text.empty() ? std::string(note) : text;
  return ops::named_dims_string(names, dims) + note;
}

const char* private_format_name(int32_t format) {
  switch (format) {
    case ACL_FORMAT_NC1HWC0: return "ACL_FORMAT_NC1HWC0";
    case ACL_FORMAT_FRACTAL_Z: return "ACL_FORMAT_FRACTAL_Z";
    case ACL_FORMAT_NC1HWC0_C04: return "ACL_FORMAT_NC1HWC0_C04";
    case ACL_FORMAT_FRACTAL_NZ: return "ACL_FORMAT_FRACTAL_NZ";
    case ACL_FORMAT_NDC1HWC0: return "ACL_FORMAT_NDC1HWC0";
    case ACL_FRACTAL_Z_3D: return "ACL_FRACTAL_Z_3D";
    default: return nullptr;
  }
}

bool is_plain_format(int32_t format) {
  switch (format) {
    case ACL_FORMAT_NCHW: case ACL_FORMAT_NHWC: case ACL_FORMAT_ND: case ACL_FORMAT_HWCN:
    case ACL_FORMAT_NDHWC: case ACL_FORMAT_NCDHW: case ACL_FORMAT_NC: case ACL_FORMAT_NCL:
      return true;
    default:
      return false;
  }
}

Shape TokenDims::per_token(std::initializer_list<const char*> names, ops::DimList inner) const {
  const ops::ShapeOption option = ops::per_token_shape(bsnd, lead, names, inner);
  return {option.dims, option.names};
}

TokenDims token_dims(const std::vector<int64_t>& x) {
  TokenDims t;
  t.bsnd = x.size() == 4;
  t.lead = ops::DimList(x.begin(), x.end() - 2);
  t.N = x[x.size() - 2];
  t.D = x[x.size() - 1];
  t.K = saturated_mul(t.N, t.D);
  t.two_n = saturated_mul(2, t.N);
  return t;
}

SinkhornCacheDims sinkhorn_cache_dims(const TokenDims& t, int64_t iterations) {
  SinkhornCacheDims c;
  c.pitch = t.N > INT64_MAX - 7 ? INT64_MAX : (t.N + 7) / 8 * 8;
  c.norm = {saturated_mul(2, iterations)};
  c.norm.insert(c.norm.end(), t.lead.begin(), t.lead.end());
  c.sum = c.norm;
  c.norm.insert(c.norm.end(), {t.N, c.pitch});
  c.sum.push_back(c.pitch);
  return c;
}

Shape step_shape(const TokenDims& t, int64_t steps, std::initializer_list<const char*> names, ops::DimList inner) {
  Shape shape;
  shape.names = {"2I"};
  if (t.bsnd) shape.names.push_back("B"), shape.names.push_back("S");
  else shape.names.push_back("T");
  shape.names.append(names.begin(), names.end());
  shape.dims = {steps};
  shape.dims.append(t.lead.begin(), t.lead.end());
  shape.dims.append(inner.begin(), inner.end());
  return shape;
}

ShapeList phi_shapes(const TokenDims& t, bool with_residual, bool without_residual) {
  const int64_t N = t.N, two_n = t.two_n;
  const int64_t square = saturated_add(two_n, saturated_mul(N, N));
  const int64_t perm = saturated_add(two_n, saturated_factorial(N));
  ShapeList shapes;
  if (with_residual) {
    shapes.push_back(named_shape({"F", "K"}, {square, t.K}, " (F=2N+N*N, K=N*D)"));
    if (perm != square) shapes.push_back(named_shape({"F", "K"}, {perm, t.K}, " (F=2N+N!)"));
  }
  if (without_residual) shapes.push_back(named_shape({"F", "K"}, {two_n, t.K}, " (F=2N: two-entry alpha)"));
  return shapes;
}

ShapeList residual_shapes(const TokenDims& t, int64_t R) {
  ShapeList shapes;
  if (R == saturated_mul(t.N, t.N)) shapes.push_back(t.per_token({"N", "N"}, {t.N, t.N}));
  shapes.push_back(t.per_token({"R"}, {R}));
  return shapes;
}

aclnnStatus Checks::fail(int code, const std::string& what) const {
  return aclnn::fail(code, std::string(op_) + ": " + what);
}

aclnnStatus Checks::result_pointers(const uint64_t* workspace_size, aclOpExecutor* const* executor) const {
  if (workspace_size == nullptr) return fail(ACLNN_ERR_PARAM_NULLPTR, "workspaceSize is NULL");
  if (executor == nullptr) return fail(ACLNN_ERR_PARAM_NULLPTR, "executor is NULL");
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::not_null(const TensorArg& arg, const char* why) const {
  if (arg.tensor == nullptr) return fail(ACLNN_ERR_PARAM_NULLPTR, std::string(arg.name) + " is NULL (" + why + ")");
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::lookup(const TensorArg& arg, const TensorInfo** info) const {
  for (const auto& [tensor, known] : seen_)
    if (tensor == arg.tensor) return *info = &known, ACLNN_SUCCESS;
  TensorInfo fresh;
  if (!tensor_info(arg.tensor, &fresh))
    return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": not a live aclTensor (destroyed or never created)");
  seen_.emplace_back(arg.tensor, std::move(fresh));
  *info = &seen_.back().second;
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::info(const TensorArg& arg, TensorInfo* info) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(arg, &found));
  *info = *found;
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::not_empty(const TensorArg& arg) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(arg, &found));
  const TensorInfo& t = *found;
  if (std::find(t.dims.begin(), t.dims.end(), 0) != t.dims.end())
    return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": empty tensor " + dims_text(t.dims) +
                                             " is not supported");
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::rank(const TensorArg& arg, std::initializer_list<size_t> ranks) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(arg, &found));
  const TensorInfo& t = *found;
  if (std::find(ranks.begin(), ranks.end(), t.dims.size()) != ranks.end()) return ACLNN_SUCCESS;
  std::string expected;
  for (size_t r : ranks) {
    if (!expected.empty()) expected += " or ";
    expected += std::to_string(r);
  }
  return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": expected rank " + expected + ", got rank " +
                                           std::to_string(t.dims.size()) + " " + dims_text(t.dims));
}

aclnnStatus Checks::shape(const TensorArg& arg, const ShapeList& shapes) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(arg, &found));
  const TensorInfo& t = *found;
  std::string expected;
  for (const Shape& s : shapes) {
    if (s.matches(t.dims)) return ACLNN_SUCCESS;
    if (!expected.empty()) expected += " or ";
    expected += s.label();
  }
  return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": expected " + expected + ", got " + dims_text(t.dims));
}

aclnnStatus Checks::x_dtype(const TensorArg& x) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(x, &found));
  const TensorInfo& t = *found;
  if (t.dtype == ACL_BF16 || t.dtype == ACL_FLOAT16) return ACLNN_SUCCESS;
  if (t.dtype == ACL_FLOAT)
    return fail(ACLNN_ERR_PARAM_INVALID,
                std::string(x.name) + ": ACL_FLOAT is not supported (ACL_BF16 or ACL_FLOAT16)");
  return dtype(x, ACL_BF16, " or ACL_FLOAT16");
}

aclnnStatus Checks::dtype(const TensorArg& arg, int32_t expected, const char* why) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(arg, &found));
  const TensorInfo& t = *found;
  if (t.dtype == expected) return ACLNN_SUCCESS;
  const std::string want = std::string(dtype_name(expected)) + why;
  if (const char* got = dtype_name(t.dtype))
    return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": expected " + want + ", got " + got);
  return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": aclDataType " + std::to_string(t.dtype) +
                                           " is not supported (expected " + want + ")");
}

aclnnStatus Checks::format(const TensorArg& arg) const {
  const TensorInfo* found;
  ACLNN_RETURN_IF_ERROR(lookup(arg, &found));
  const TensorInfo& t = *found;
  if (const char* name = private_format_name(t.format))
    return fail(ACLNN_ERR_PARAM_INVALID,
                std::string(arg.name) + ": private format " + name + " is not supported (use ACL_FORMAT_ND)");
  if (!is_plain_format(t.format))
    return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": unknown aclFormat " + std::to_string(t.format));
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::op_impl_mode(int64_t mode) const {
  if (mode != 0 && mode != 1)
    return fail(ACLNN_ERR_PARAM_INVALID, "opImplMode must be 0 (fp32) or 1 (HF32), got " + std::to_string(mode));
  return ACLNN_SUCCESS;
}

aclnnStatus Checks::same_format(const TensorArg& arg, const TensorArg& like) const {
  TensorInfo t, l;
  ACLNN_RETURN_IF_ERROR(info(arg, &t));
  ACLNN_RETURN_IF_ERROR(info(like, &l));
  if (t.format == l.format) return ACLNN_SUCCESS;
  return fail(ACLNN_ERR_PARAM_INVALID, std::string(arg.name) + ": expected " + like.name + "'s format " +
                                           format_text(l.format) + ", got " + format_text(t.format));
}

aclnnStatus Checks::num_iters(int64_t num_iters) const {
  if (num_iters < 1 || num_iters > 100)
    return fail(ACLNN_ERR_PARAM_INVALID, "numIters must be in [1, 100], got " + std::to_string(num_iters));
  return ACLNN_SUCCESS;
}

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n = saturated_mul(n, d);
  return n;
}

aclnnStatus to_cache_view(const char* op, const TensorArg& arg, const std::vector<int64_t>& dims, TensorView* view) {
  TensorView v;
  ACLNN_RETURN_IF_ERROR(to_view(op, arg, &v));
  const std::string where = std::string(op) + ": " + arg.name;
  const std::vector<int64_t> given(v.shape.begin(), v.shape.begin() + v.rank);
  if (element_count(given) != element_count(dims))
    return fail(ACLNN_ERR_PARAM_INVALID, where + ": expected " + std::to_string(element_count(dims)) +
                                             " elements (" + dims_text(dims) + "), got " +
                                             std::to_string(element_count(given)) + " " + dims_text(given));
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    if (v.shape[i] > 1 && v.strides[i] != stride)
      return fail(ACLNN_ERR_PARAM_INVALID, where + ": expected a contiguous tensor (the cache's layout is the "
                                                   "library's), got strides " +
                                               ops::dims_string(v.strides.data(), v.rank) + " for " +
                                               dims_text(given));
    stride *= v.shape[i];
  }
  TensorView c;
  c.data = v.data;
  c.dtype = v.dtype;
  c.rank = int32_t(dims.size());
  stride = 1;
  for (int i = c.rank - 1; i >= 0; --i) {
    c.shape[i] = dims[i];
    c.strides[i] = stride;
    stride *= dims[i];
  }
  *view = c;
  return ACLNN_SUCCESS;
}

TensorView without_last_dim(const TensorView& view) {
  TensorView v = view;
  if (v.rank > 0) {
    --v.rank;
    v.shape[v.rank] = 0;
    v.strides[v.rank] = 0;
  }
  return v;
}

}  // namespace mhc::faces::aclnn
