// The engines' torch ops' arguments (engine_ops.cpp): each checked in the engine's own
// words before anything is allocated (a claimed shape never reaches an allocator
// unchecked), then read as mhc's views; mhc's own messages said in the engine's names.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "mhc/mhc.hpp"

namespace mhc::torch_face {

using at::Tensor;

// The streams [..., N, D] as [T, N, D] (a view where strides allow), with the leading
// dims: defined, N, D >= 1, at most MHC_MAX_ELEMENTS elements.
struct Streams {
  Tensor flat;
  std::vector<int64_t> lead;
  int64_t T = 0, N = 0, D = 0;
};
Streams streams(const Tensor& t, const char* name);

// A per-token tensor [..., *inner] of the streams' T tokens, as [T, *inner]; `inner`
// spelled out in `expected` for the message. A [..., N, 1] `post` (vLLM's) passes as
// [..., N] when squeeze_unit is set.
Tensor per_token(const Tensor& t, const char* name, int64_t T, std::initializer_list<int64_t> inner,
                 bool squeeze_unit = false);

// A weight of exactly `shape` (hc_fn [F, N*D], hc_base [F], norm_weight [D]).
void check_shape(const Tensor& t, const char* name, std::initializer_list<int64_t> shape);
// A scale of `entries` values (the head's: 0-d or [1]; the pre's [3]).
void check_entries(const Tensor& t, const char* name, int64_t entries);
// eps: finite and >= 0; a multiplier: finite.
void check_eps(const char* name, double value);
void check_finite(const char* name, double value);
// Every tensor on the streams' device: all CPU, or all meta (shapes only); meta streams
// among CPU tensors are the streams' error, a meta tensor among CPU streams its own.
void check_devices(const Tensor& x, const char* x_name,
                   std::initializer_list<std::pair<const Tensor*, const char*>> others);

// The view mhc reads (a checked CPU tensor).
TensorView view_of(const Tensor& t, const char* name);
std::optional<TensorView> view_of(const c10::optional<Tensor>& t, const char* name);

// mhc's error as torch's TypeError (a dtype) or ValueError, its leading tensor name
// said as the engine says it: renames are {mhc's name, the engine's}.
using Renames = std::initializer_list<std::pair<const char*, const char*>>;
void raise_on_error(const Status& s, Renames renames = {});

}  // namespace mhc::torch_face
