#include "runtime/workspace.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace mhc::runtime {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;

struct ThreadBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~ThreadBuffer() { free_pages(data, bytes); }
};
thread_local ThreadBuffer buffer;

}  // namespace

void* allocate_pages(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  if (bytes >= kHugePage) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

void free_pages(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

void* thread_workspace(size_t bytes) {
  if (bytes <= buffer.bytes) return buffer.data;
  free_pages(buffer.data, buffer.bytes);
  buffer.bytes = 0;
  // Round up to whole huge pages so small growth does not reallocate each call.
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  buffer.data = allocate_pages(rounded);
  if (buffer.data) buffer.bytes = rounded;
  return buffer.data;
}

void release_thread_workspace() {
  free_pages(buffer.data, buffer.bytes);
  buffer = {};
}

}  // namespace mhc::runtime
