// Workspace memory for the C++ and C faces: one grow-only buffer per calling
// thread, reused across calls. Fresh memory is expensive on the VMs this runs
// on (a page fault per 4 KiB page: mhc-bench's first-touch probe), so a training loop should not
// pay it on every step; large buffers are also advised to use transparent huge
// pages. The buffer lives until the thread exits or release_thread_workspace().
#pragma once

#include <cstddef>

namespace mhc::runtime {

// A 64-byte aligned buffer of at least `bytes` bytes, or nullptr if it cannot be had.
void* thread_workspace(size_t bytes);
void release_thread_workspace();

// Anonymous memory advised to use huge pages (for large outputs and workspaces).
void* allocate_pages(size_t bytes);
void free_pages(void* p, size_t bytes);

}  // namespace mhc::runtime
