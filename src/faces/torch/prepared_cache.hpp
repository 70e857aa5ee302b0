// The engines' weights prepared once, implicitly: per weight set the library's
// handle (prepare_pre), kept while the tensors live and are unchanged. Keyed by the
// tensors' identity, views and version counters: an in-place change (an optimizer's
// step, a weight reload into the same tensor) moves a version and makes a new handle.
// Entries hold weak references only: a freed tensor's entry is replaced at the next
// lookup of its data address, and past 4096 entries the cache starts afresh.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "mhc/mhc.hpp"

namespace mhc::torch_face {

// The handle for these weights and their views (the very views the call passes), made
// at their first call. Views of absent tensors: gamma nullopt.
std::shared_ptr<const PreparedPre> prepared_weights(const at::Tensor& phi, const TensorView& phi_view,
                                                    const at::Tensor& alpha, const TensorView& alpha_view,
                                                    const at::Tensor& bias, const TensorView& bias_view);

struct PreparedCacheInfo {
  int64_t entries = 0;  // weight sets held
  int64_t made = 0;     // handles made since the process began
};
PreparedCacheInfo prepared_cache_info();
void clear_prepared_cache();

}  // namespace mhc::torch_face
