// Large outputs of the engines' torch ops from a cache of buffers, as the Python face's
// _output_cache does: on virtual machines the first touch of fresh memory costs a page
// fault per 4 KiB (engine_decode.py: hc_post_fused_cpu at T=1024, D=4096 took 18 ms
// with fresh at::empty outputs against 3.6 ms with reused ones). A buffer goes back to
// the cache when the last tensor using it is gone; idle buffers are held up to
// MHC_OUTPUT_CACHE_MB (default 2048 MiB; 0 turns the cache off).
#pragma once

#include <ATen/ATen.h>

namespace mhc::torch_face {

// An uninitialised contiguous CPU tensor (meta tensors: like at::empty).
at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace mhc::torch_face
