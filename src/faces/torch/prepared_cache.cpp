// The engines' implicit cache of prepared weights (prepared_cache.hpp).
#include "faces/torch/prepared_cache.hpp"

#include <c10/util/intrusive_ptr.h>

#include <array>
#include <mutex>
#include <unordered_map>

namespace mhc::torch_face {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

bool same_view(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.rank == b.rank && a.shape == b.shape && a.strides == b.strides;
}

struct Weight {
  WeakImpl impl{c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
  int64_t version = 0;  // Tensor::_version()
  TensorView view;
  bool same(const at::Tensor& t, const TensorView& v) const {
    // lock(): the tensor still lives and is this one (an address reused by a new one is another).
    return same_view(view, v) && impl.lock().get() == t.unsafeGetTensorImpl() &&
           t._version() == version;
  }
  static Weight of(const at::Tensor& t, const TensorView& v) {
    return {WeakImpl(t.getIntrusivePtr()), t._version(), v};
  }
};

struct Entry {
  std::array<Weight, 3> weights;
  std::shared_ptr<const PreparedPre> handle;
};

// Engines hold a few hundred weight sets (DeepSeek-V4: two sites a layer and the head);
// past this many, the cache starts again (handles in use live on in their calls).
constexpr size_t kMaxEntries = 4096;

struct Cache {
  std::mutex mutex;
  std::unordered_map<const void*, Entry> entries;  // keyed by phi's data
  int64_t made = 0;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: calls may come during exit
  return *c;
}

}  // namespace

std::shared_ptr<const PreparedPre> prepared_weights(const at::Tensor& phi, const TensorView& phi_view,
                                                    const at::Tensor& alpha, const TensorView& alpha_view,
                                                    const at::Tensor& bias, const TensorView& bias_view) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto found = c.entries.find(phi_view.data);
  if (found != c.entries.end()) {
    const auto& w = found->second.weights;
    if (w[0].same(phi, phi_view) && w[1].same(alpha, alpha_view) && w[2].same(bias, bias_view))
      return found->second.handle;
  }
  std::shared_ptr<const PreparedPre> handle;
  // A weight the library refuses: no handle, and the call reports it in its own words.
  if (!prepare_pre(phi_view, alpha_view, bias_view, std::nullopt, &handle).ok()) return nullptr;
  if (found == c.entries.end() && c.entries.size() >= kMaxEntries) c.entries.clear();
  c.entries[phi_view.data] = {{Weight::of(phi, phi_view), Weight::of(alpha, alpha_view), Weight::of(bias, bias_view)},
                              handle};
  ++c.made;
  return handle;
}

PreparedCacheInfo prepared_cache_info() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {int64_t(c.entries.size()), c.made};
}

void clear_prepared_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.clear();
}

}  // namespace mhc::torch_face
