// The engines' ops' output cache (output_cache.hpp).
#include "faces/torch/output_cache.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace mhc::torch_face {
namespace {

constexpr size_t kMinBytes = size_t(1) << 20;

size_t capacity_from_environment() {
  const char* value = std::getenv("MHC_OUTPUT_CACHE_MB");
  if (value == nullptr || *value == '\0') return size_t(2048) << 20;
  char* end = nullptr;
  const unsigned long long mib = std::strtoull(value, &end, 10);
  return *end == '\0' ? size_t(mib) << 20 : size_t(2048) << 20;
}

class Cache {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = idle_.find(bytes);
      if (it != idle_.end() && !it->second.empty()) {
        void* buffer = it->second.back();
        it->second.pop_back();
        idle_bytes_ -= bytes;
        return buffer;
      }
    }
    void* buffer = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (buffer == nullptr) throw std::bad_alloc();
    return buffer;
  }
  void give_back(void* buffer, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_bytes_ + bytes <= capacity_) {
        idle_[bytes].push_back(buffer);
        idle_bytes_ += bytes;
        return;
      }
    }
    std::free(buffer);
  }

 private:
  std::mutex mutex_;
  const size_t capacity_ = capacity_from_environment();
  std::map<size_t, std::vector<void*>> idle_;
  size_t idle_bytes_ = 0;
};

Cache& cache() {
  static Cache* instance = new Cache;  // never destroyed: tensors may outlive static destruction
  return *instance;
}

}  // namespace

at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  int64_t elements = 1, bytes_signed = 0;
  for (int64_t s : sizes) TORCH_CHECK(s >= 0 && !__builtin_mul_overflow(elements, s, &elements), "mhc: output size overflows");
  TORCH_CHECK(!__builtin_mul_overflow(elements, int64_t(options.dtype().itemsize()), &bytes_signed),
              "mhc: output size overflows");
  const size_t bytes = size_t(bytes_signed);
  if (!options.device().is_cpu() || bytes < kMinBytes) return at::empty(sizes, options);
  void* buffer = cache().take(bytes);
  return at::from_blob(
      buffer, sizes, [bytes](void* p) { cache().give_back(p, bytes); }, options);
}

}  // namespace mhc::torch_face
