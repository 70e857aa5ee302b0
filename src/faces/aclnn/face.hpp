// Internals of the aclnn face (libmhc_aclnn): error messages, handle registries,
// aclTensor -> mhc::TensorView translation and executors. The face translates
// CANN's arguments into the operator layer's and nothing more: every shape and
// dtype rule is mhc::ops::pre_*::validate's.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>

#include "acl/acl.h"
#include "core/problem.hpp"
#include "faces/guarded.hpp"
#include "mhc/mhc.hpp"

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

template <class Handle>
uintptr_t handle_id(Handle* h) { return reinterpret_cast<uintptr_t>(h); }
template <class Handle>
Handle* as_handle(uintptr_t id) { return reinterpret_cast<Handle*>(id); }

// A NULL stream (CANN's default stream) or one from aclrtCreateStream.
bool stream_is_usable(aclrtStream stream);

// --- tensors ---
// One named tensor argument of an operator; `tensor` may be NULL.
struct TensorArg {
  const char* name;  // CANN's parameter name, for messages
  const aclTensor* tensor;
};

// A live aclTensor translated to a view: data = base + offset * element size,
// the view dims and strides (elements). Rejects, with ACLNN_ERR_PARAM_INVALID,
// what only CANN's tensors can be: a destroyed handle, a dtype with no mhc
// counterpart, a private format, an empty tensor, a view outside its storage.
aclnnStatus to_view(const char* op, const TensorArg& arg, TensorView* view);
// Same, as an optional: absent when the argument is NULL.
aclnnStatus to_optional_view(const char* op, const TensorArg& arg, std::optional<TensorView>* view);
// CANN takes x in bf16 or fp16 only; fp32 x is rejected as CANN rejects it.
aclnnStatus check_x_not_fp32(const char* op, const TensorView& x);

// --- checks shared by the operators ---
#define ACLNN_RETURN_IF_ERROR(expr)               \
  do {                                            \
    const aclnnStatus status_ = (expr);           \
    if (status_ != ACLNN_SUCCESS) return status_; \
  } while (0)

// V2: opImplMode in {0, 1}, checked before anything else.
aclnnStatus check_op_impl_mode(const char* op, int64_t mode);
// Each `required` tensor, then workspaceSize and executor: NULL -> 161001.
aclnnStatus check_required(const char* op, std::initializer_list<TensorArg> required,
                           const uint64_t* workspace_size, aclOpExecutor* const* executor);

// --- executors ---
using Problem = std::variant<core::ForwardProblem, core::BackwardProblem>;

// Registers an executor holding a copy of the validated problem (no reference
// to any aclTensor) and reports the workspace the run phase needs.
aclnnStatus create_executor(const char* run_op, Problem problem, size_t core_workspace_bytes,
                            uint64_t* workspace_size, aclOpExecutor** executor);
// The run phase of `op`: checks the executor (live, made by `op`'s first
// phase), the workspace and the stream; then runs synchronously and frees the
// executor. A failed check leaves the executor live (destroy or run it again).
aclnnStatus run_executor(const char* op, void* workspace, uint64_t workspace_size,
                         aclOpExecutor* executor, aclrtStream stream);

// Map a Status of the operator layer to the aclnn code (same numbers) and
// record its message, prefixed with the operator name.
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
