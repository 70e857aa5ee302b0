// The threads and the workspace of one operator call, shared by the drivers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "mhc/mhc.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace mhc::ops {

// The plans size per-worker scratch by this count, so it is capped where the pool is.
inline int resolve_threads(int requested) {
  return std::min(requested > 0 ? requested : runtime::default_thread_count(), runtime::kMaxThreads);
}

inline Status workspace_error(size_t needed, size_t given, const void* workspace) {
  if (needed > 0 && workspace == nullptr)
    return {StatusCode::null_pointer, ErrorKind::null,
            "workspace: " + std::to_string(needed) + " bytes needed, got a null pointer"};
  if (given < needed)
    return {StatusCode::invalid_argument, ErrorKind::value,
            "workspace: expected at least " + std::to_string(needed) + " bytes, got " + std::to_string(given)};
  if (reinterpret_cast<uintptr_t>(workspace) % 64 != 0)
    return {StatusCode::invalid_argument, ErrorKind::layout, "workspace: expected 64-byte alignment"};
  return {};
}

// run(workspace, bytes) in the calling thread's workspace (grow-only, reused
// across calls: fresh pages are slow to touch on VMs); a workspace that cannot be
// had is reported before anything is written.
template <class Run>
Status in_thread_workspace(size_t bytes, Run&& run) {
  void* workspace = bytes > 0 ? runtime::thread_workspace(bytes) : nullptr;
  if (bytes > 0 && workspace == nullptr)
    return {StatusCode::runtime_error, ErrorKind::runtime,
            "workspace: could not allocate " + std::to_string(bytes) + " bytes"};
  return run(workspace, bytes);
}

}  // namespace mhc::ops
