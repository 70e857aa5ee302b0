// Internals of the aclnn face (libmhc_aclnn): error messages, handle registries,
// aclTensor -> mhc::TensorView translation, the first phase's checks and
// executors. The face checks what CANN checks, in CANN's order, with CANN's
// codes (SPEC §7); mhc::ops::pre_*::validate (and the layer operators'
// mhc::ops::{sinkhorn,post,pre_sinkhorn}::validate_*) then checks the rest
// (memory, strides, overlap, size limits) and makes the problem.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "acl/acl.h"
#include "core/post_problem.hpp"
#include "core/problem.hpp"
#include "core/sinkhorn_problem.hpp"
#include "faces/guarded.hpp"
#include "mhc/mhc.hpp"
#include "ops/pre/forward.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"
#include "ops/tensor_checks.hpp"

namespace mhc::faces::aclnn {

// --- errors: the thread's last failure message, read by aclGetRecentErrMsg ---
void set_recent_error(std::string message);
// Records `message` and returns `code` (for `return fail(...)`).
int fail(int code, std::string message);

// --- enum arguments ---
// The int a C caller passed for an enum parameter (aclDataType, aclFormat,
// aclrtMemcpyKind). C allows any int there, but in C++ a value outside the
// enumerators' range is undefined behaviour when loaded as the enum; the bits
// are read instead, and checked as an int.
template <class Enum>
int32_t enum_value(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized here");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// --- handles ---
// Handles given to the caller (streams, contexts, tensors, executors) are ids,
// never addresses, and ids are never reused: a stale or foreign handle is
// always recognised as such, so "run twice" or "destroy twice" is an error
// instead of a use-after-free.
uintptr_t next_handle_id();

template <class Handle>
uintptr_t handle_id(Handle* h) { return reinterpret_cast<uintptr_t>(h); }
template <class Handle>
Handle* as_handle(uintptr_t id) { return reinterpret_cast<Handle*>(id); }

template <class T>
class HandleRegistry {
 public:
  uintptr_t add(std::shared_ptr<T> object) {
    const uintptr_t id = next_handle_id();
    std::lock_guard<std::mutex> lock(mutex_);
    live_.emplace(id, std::move(object));
    return id;
  }
  // The object, or nullptr when the handle is not live.
  std::shared_ptr<T> find(uintptr_t id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(id);
    return it == live_.end() ? nullptr : it->second;
  }
  bool contains(uintptr_t id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(id) != 0;
  }
  // Whether every handle but NULL is live, under one lock.
  template <class Handle>
  bool contains_all(std::span<Handle* const> handles) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Handle* h : handles)
      if (h != nullptr && live_.count(handle_id(h)) == 0) return false;
    return true;
  }
  // Removes and returns the object; nullptr when not live (so of two threads
  // taking the same handle, exactly one gets it).
  std::shared_ptr<T> take(uintptr_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    live_.erase(it);
    return object;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> live_;
};

// A NULL stream (CANN's default stream) or one from aclrtCreateStream.
bool stream_is_usable(aclrtStream stream);

// --- tensors ---
// One named tensor argument of an operator; `tensor` may be NULL.
struct TensorArg {
  const char* name;  // CANN's parameter name, for messages
  const aclTensor* tensor;
};

// What the first phase's checks read of a live aclTensor.
struct TensorInfo {
  std::vector<int64_t> dims;  // the view's
  int32_t dtype = ACL_DT_UNDEFINED;  // aclDataType, as passed (any int)
  int32_t format = ACL_FORMAT_ND;    // aclFormat, as passed (any int)
};
// False when `tensor` is not a live aclTensor (destroyed or never created).
bool tensor_info(const aclTensor* tensor, TensorInfo* info);
bool tensor_is_live(const aclTensor* tensor);
// Whether every non-NULL tensor of `tensors` is live (one look at the registry).
bool tensors_are_live(std::span<const aclTensor* const> tensors);

// "[a,b,c]": dims in messages, as the core writes them (ops::dims_string).
inline std::string dims_text(const std::vector<int64_t>& dims) {
  return ops::dims_string(dims.data(), int(dims.size()));
}
// The name of a private (Ascend-tiled) aclFormat, else nullptr.
const char* private_format_name(int32_t format);
// Formats that describe plain row-major memory (the dims say everything).
bool is_plain_format(int32_t format);

// A live aclTensor translated to a view: data = base + offset * element size,
// the view dims and strides (elements). Rejects, with ACLNN_ERR_PARAM_INVALID,
// what only CANN's tensors can be: a destroyed handle, a dtype with no mhc
// counterpart, a private format, an empty tensor, a view outside its storage.
aclnnStatus to_view(const char* op, const TensorArg& arg, TensorView* view);
// Same, as an optional: absent when the argument is NULL.
aclnnStatus to_optional_view(const char* op, const TensorArg& arg, std::optional<TensorView>* view);

// The product of dims, saturated at INT64_MAX (only compared with counts).
int64_t element_count(const std::vector<int64_t>& dims);
// A cache buffer of MhcSinkhorn (SPEC §10): any shape holding exactly the
// elements of `dims`, contiguous; translated (to_view's checks) and handed to
// the core as the contiguous view `dims` of the same memory. 161002 when it is
// not contiguous or holds another count.
aclnnStatus to_cache_view(const char* op, const TensorArg& arg, const std::vector<int64_t>& dims, TensorView* view);
// A view without its last dim, which has extent 1 (CANN's invRms [..,1] as the core's [..]).
TensorView without_last_dim(const TensorView& view);

#define ACLNN_RETURN_IF_ERROR(expr)               \
  do {                                            \
    const aclnnStatus status_ = (expr);           \
    if (status_ != ACLNN_SUCCESS) return status_; \
  } while (0)

// --- the first phase's checks (SPEC §7, in the order the operators call them) ---
// A shape a tensor may take, and how a message prints it (label()): "[T,D]=[5,8]"
// then `note`, or the note alone without names. The text is built only for a
// message: every call checks its tensors against such shapes.
struct Shape {
  ops::DimList dims;
  ops::NameList names;
  const char* note = "";
  std::string text = {};  // without names: the label as given, else the note
  std::string label() const;
  bool matches(const std::vector<int64_t>& given) const {
    return given.size() == dims.size() && std::equal(dims.begin(), dims.end(), given.begin());
  }
};
// The shapes a tensor may take (at most three anywhere: phi's).
using ShapeList = ops::InlineList<Shape, 4>;
// named_shape({"N","D"}, {4,8}) prints "[N,D]=[4,8]" (then `note`).
Shape named_shape(ops::NameList names, ops::DimList dims, const char* note = "");

// What x says of the per-token tensors: the token dims ([B,S] or [T]), N, D
// and K = N*D (saturated, as 2N: only compared with dims).
struct TokenDims {
  bool bsnd = false;
  ops::DimList lead;  // [B,S] or [T]
  int64_t N = 0, D = 0, K = 0, two_n = 0;  // K and two_n saturated
  // The per-token shape with trailing dims `inner`, named `names`.
  Shape per_token(std::initializer_list<const char*> names, ops::DimList inner) const;
  // x's own shape.
  Shape x_shape() const { return per_token({"N", "D"}, {N, D}); }
};
// x's dims are [B,S,N,D] or [T,N,D], non-empty (checked before).
TokenDims token_dims(const std::vector<int64_t>& x_dims);
// MhcSinkhorn's caches (SPEC §10) as the core takes them, contiguous:
// norm [2I, <token dims>, N, Na] and sum [2I, <token dims>, Na] with the pitch
// Na = 8*ceil(N/8) (counts saturated: only compared with counts).
struct SinkhornCacheDims {
  std::vector<int64_t> norm, sum;
  int64_t pitch = 0;
};
SinkhornCacheDims sinkhorn_cache_dims(const TokenDims& t, int64_t iterations);
// [2I, <token dims>, inner...] (names "2I", "B","S" or "T", then `names`):
// CANN's shapes of MhcPreSinkhorn's per-step caches sumOut and normOut.
Shape step_shape(const TokenDims& t, int64_t steps, std::initializer_list<const char*> names, ops::DimList inner);
// phi's shapes [F,K]: with a residual branch F = 2N+N*N or 2N+N!, without F = 2N.
ShapeList phi_shapes(const TokenDims& t, bool with_residual, bool without_residual);
// hRes / gradHRes: [..,N,N] (only when R = N*N) or [..,R].
ShapeList residual_shapes(const TokenDims& t, int64_t R);

// Each check records a message "<op>: <tensor>: ..." (CANN's parameter names)
// and returns CANN's code; the checks read dims, dtypes and formats only.
class Checks {
 public:
  explicit Checks(const char* op) : op_(op) {}
  aclnnStatus fail(int code, const std::string& what) const;
  // workspaceSize and executor, before anything else: NULL -> 161001.
  aclnnStatus result_pointers(const uint64_t* workspace_size, aclOpExecutor* const* executor) const;
  // NULL -> 161001, `why` saying why the tensor is required.
  aclnnStatus not_null(const TensorArg& arg, const char* why = "required") const;
  // The descriptor of a given tensor; a handle that is not live -> 161002.
  aclnnStatus info(const TensorArg& arg, TensorInfo* info) const;
  // The rest give 161002.
  aclnnStatus not_empty(const TensorArg& arg) const;
  aclnnStatus rank(const TensorArg& arg, std::initializer_list<size_t> ranks) const;
  aclnnStatus shape(const TensorArg& arg, const ShapeList& shapes) const;
  // x: ACL_BF16 or ACL_FLOAT16 (CANN rejects ACL_FLOAT x; the C++ API takes it).
  aclnnStatus x_dtype(const TensorArg& x) const;
  aclnnStatus dtype(const TensorArg& arg, int32_t expected, const char* why = "") const;
  aclnnStatus format(const TensorArg& arg) const;
  // V2: 0 (fp32) or 1 (HF32).
  aclnnStatus op_impl_mode(int64_t mode) const;
  // The format `arg` must share with `like` (MhcSinkhorn's outputs share x's, as CANN checks).
  aclnnStatus same_format(const TensorArg& arg, const TensorArg& like) const;
  // numIters of MhcSinkhorn and MhcPreSinkhorn: 1 to 100 (CANN's aclnnMhcSinkhorn range).
  aclnnStatus num_iters(int64_t num_iters) const;

 private:
  // A tensor's descriptor, looked up in the registry once per call's checks (a
  // lookup locks it; a decode step's checks ask a dozen times).
  aclnnStatus lookup(const TensorArg& arg, const TensorInfo** info) const;
  const char* op_;
  mutable std::deque<std::pair<const aclTensor*, TensorInfo>> seen_;  // stable references
};

// --- executors ---
// MhcSinkhorn and MhcPost have one problem struct for both directions: the
// executor tells the directions apart by these wrappers.
struct SinkhornForward { core::SinkhornProblem problem; };
struct SinkhornBackward { core::SinkhornProblem problem; };
struct PostForward { core::PostProblem problem; };
struct PostBackward { core::PostProblem problem; };
// A call CANN accepts and runs nothing for (its empty cases): the run phase
// checks its arguments, writes nothing and frees the executor.
struct NothingToRun {};
// MhcPre's primitive, shared with the primitive cache of the thread that made it.
struct PreForward { std::shared_ptr<const ops::pre::forward::Primitive> primitive; };
using Problem = std::variant<PreForward, core::BackwardProblem, SinkhornForward, SinkhornBackward,
                             PostForward, PostBackward, ops::pre_sinkhorn::ForwardProblem,
                             ops::pre_sinkhorn::BackwardProblem, NothingToRun>;

// Registers an executor holding the validated problem (no reference to any
// aclTensor) and reports the workspace the run phase needs.
aclnnStatus create_executor(const char* run_op, Problem problem, size_t core_workspace_bytes,
                            uint64_t* workspace_size, aclOpExecutor** executor);
// The run phase of `op`: checks the executor (live, made by `op`'s first
// phase), the workspace and the stream; then runs synchronously and frees the
// executor. A failed check leaves the executor live (destroy or run it again).
aclnnStatus run_executor(const char* op, void* workspace, uint64_t workspace_size,
                         aclOpExecutor* executor, aclrtStream stream);

// Map a Status of the operator layer to the aclnn code (same numbers) and
// record its message, prefixed with the entry point `op`, each word of it in
// CANN's names as the description renames them for op's operator (MhcSinkhorn's
// z is x, its h_res is output; h_res is hRes for all).
aclnnStatus from_status(const char* op, const Status& status);

// Runs body() and turns any escaping exception into an error code: no C++
// exception crosses the C boundary.
template <class Body>
int guarded(const char* op, Body body) {
  return faces::guarded(body, [op](bool out_of_memory, const char* what) -> int {
    if (out_of_memory) return fail(ACLNN_ERR_INNER, std::string(op) + ": out of host memory");
    return fail(ACLNN_ERR_INNER, std::string(op) + ": internal error" + (what != nullptr ? std::string(": ") + what : ""));
  });
}

}  // namespace mhc::faces::aclnn
