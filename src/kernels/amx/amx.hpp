// The AMX family: the forward's GEMM on AMX-BF16 tiles when x is bf16 or fp16.
// The registry builds it on the avx512 tables: they run what it does not apply
// to, and finish its items (ForwardItem::finish).
#pragma once

#include <cstdint>

#include "kernels/pre_forward.hpp"
#include "kernels/tables.hpp"

namespace mhc::kernels::amx {

// Most tokens per forward item on the tile path: the packed phi (3 bf16 parts) is
// read from L3 once per item, so items are longer than the SIMD family's
// (kTokensPerItem); the driver cuts short calls finer. Items of long
// tokens are halved so that an item's x stays within kItemXBytes, which h_in
// reads a second time (mhc-bench b forward: K = 28672, 14 MiB of x per 256
// tokens).
inline constexpr int64_t kItemTokens = 256;
inline constexpr int64_t kItemXBytes = int64_t(8) << 20;

// Whether the forward of a call of this shape runs on tiles (the registry entry's
// applies hook; other calls run on the avx512 tables), from dtypes and dims only:
// bf16 x with F <= 96, fp16 x with F <= 80 (the C tiles of 16 tokens, the A
// tiles of x's parts and a B tile fit the eight tiles), fp32 operands (not HF32).
bool forward_uses_tiles(const PreShape& d);

int64_t forward_item_tokens(const PreShape& d);
int64_t forward_prepared_bytes(const PreShape& d);
int64_t forward_scratch_floats(const PreShape& d);
bool forward_prepare(const ForwardOperands& o, void* prepared, int64_t part, int64_t parts, float* scratch);
void forward_tokens(const ForwardItem& item, int64_t t0, int64_t t1);

}  // namespace mhc::kernels::amx
