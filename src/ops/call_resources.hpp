// The threads and the workspace of one operator call, shared by the drivers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "mhc/mhc.hpp"
#include "runtime/thread_pool.hpp"

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

}  // namespace mhc::ops
