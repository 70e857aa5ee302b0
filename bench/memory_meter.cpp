// Peak-RSS and counted-heap meters (see memory_meter.hpp).
//
// The count: the link wraps the C allocation functions and mmap/munmap of every
// object linked into mhc-bench (libmhc.a included) with -Wl,--wrap=NAME, and this
// file replaces the global C++ operator new/delete (which then call the wrapped
// malloc/free). Heap sizes come from malloc_usable_size, so free needs no table;
// anonymous mappings count their length (munmap passes it back).
#include "memory_meter.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

extern "C" {
void* __real_malloc(size_t);
void* __real_calloc(size_t, size_t);
void* __real_realloc(void*, size_t);
void* __real_aligned_alloc(size_t, size_t);
int __real_posix_memalign(void**, size_t, size_t);
void __real_free(void*);
void* __real_mmap(void*, size_t, int, int, int, off_t);
int __real_munmap(void*, size_t);
}

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void count_bytes(int64_t bytes) {
  const int64_t now = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}

void count_allocation(void* p) {
  if (p) count_bytes(int64_t(malloc_usable_size(p)));
}

void count_release(void* p) {
  if (p) g_live.fetch_sub(int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
}

int64_t read_status_kib(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kib = -1;
  const size_t len = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, len) == 0) { kib = std::strtoll(line + len, nullptr, 10); break; }
  std::fclose(f);
  return kib;
}

}  // namespace

extern "C" {
void* __wrap_malloc(size_t n) { void* p = __real_malloc(n); count_allocation(p); return p; }
void* __wrap_calloc(size_t n, size_t s) { void* p = __real_calloc(n, s); count_allocation(p); return p; }
void* __wrap_aligned_alloc(size_t a, size_t n) {
  void* p = __real_aligned_alloc(a, n);
  count_allocation(p);
  return p;
}
int __wrap_posix_memalign(void** out, size_t a, size_t n) {
  const int rc = __real_posix_memalign(out, a, n);
  if (rc == 0) count_allocation(*out);
  return rc;
}
void* __wrap_realloc(void* old, size_t n) {
  count_release(old);
  void* p = __real_realloc(old, n);
  if (p) count_allocation(p);
  else if (old && n) count_allocation(old);  // failed: the old block is still live
  return p;
}
void __wrap_free(void* p) { count_release(p); __real_free(p); }
// Anonymous mappings only: file mappings are not memory the call allocates.
void* __wrap_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  void* p = __real_mmap(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && (flags & MAP_ANONYMOUS)) count_bytes(int64_t((len + 4095) / 4096 * 4096));
  return p;
}
// Assumes what the wrapped code unmaps it mapped anonymously (true of libmhc).
int __wrap_munmap(void* addr, size_t len) {
  const int rc = __real_munmap(addr, len);
  if (rc == 0) g_live.fetch_sub(int64_t((len + 4095) / 4096 * 4096), std::memory_order_relaxed);
  return rc;
}
}  // extern "C"

// ---- replaced global operator new/delete: through the counted malloc/free -------
namespace {
void* counted_new(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) p = __wrap_malloc(n);
  else if (__wrap_posix_memalign(&p, align, n) != 0) p = nullptr;
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_new(n, 0); }
void* operator new[](std::size_t n) { return counted_new(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_new(n, size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_new(n, size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted_new(n, 0); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted_new(n, 0); } catch (...) { return nullptr; }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_new(n, size_t(a)); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_new(n, size_t(a)); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { __wrap_free(p); }
void operator delete[](void* p) noexcept { __wrap_free(p); }
void operator delete(void* p, std::size_t) noexcept { __wrap_free(p); }
void operator delete[](void* p, std::size_t) noexcept { __wrap_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { __wrap_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { __wrap_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { __wrap_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { __wrap_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { __wrap_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { __wrap_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { __wrap_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { __wrap_free(p); }

namespace mhc_bench {

int64_t resident_bytes() { return read_status_kib("VmRSS:") * 1024; }
int64_t peak_resident_bytes() { return read_status_kib("VmHWM:") * 1024; }
int64_t counted_live_bytes() { return g_live.load(); }

void PeakRssMeter::start() {
  malloc_trim(0);
  reset_ok_ = false;
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    reset_ok_ = std::fputs("5", f) >= 0;
    reset_ok_ = (std::fclose(f) == 0) && reset_ok_;
  }
  baseline_ = resident_bytes();
}

int64_t PeakRssMeter::extra_bytes() const {
  if (!reset_ok_) return -1;
  return std::max<int64_t>(0, peak_resident_bytes() - baseline_);
}

void CountedMemoryMeter::start() {
  start_live_ = g_live.load();
  g_peak.store(start_live_);
}

int64_t CountedMemoryMeter::peak_extra_bytes() const {
  return std::max<int64_t>(0, g_peak.load() - start_live_);
}

int64_t CountedMemoryMeter::retained_bytes() const { return g_live.load() - start_live_; }

}  // namespace mhc_bench
