// AMX tile operations as inline assembly. The compiler's intrinsics
// (_tile_loadd, _tile_dpbf16ps, ...) take tile numbers as macro tokens and need
// -mamx-* for the whole file; these take them as template constants, so a kernel
// can name its tiles from template parameters, and need no compiler flag (the
// assembler knows the instructions). Only run where tiles_usable() says yes.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace mhc::kernels::amx {

// The 64-byte operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

inline void load_config(const TileConfig& config) { asm volatile("ldtilecfg %0" ::"m"(config)); }
inline void release_tiles() { asm volatile("tilerelease" ::: "memory"); }

template <int Tile>
inline void tile_zero() {
  asm volatile("tilezero %%tmm%c0" ::"i"(Tile));
}
template <int Tile>
inline void tile_load(const void* base, int64_t stride_bytes) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride_bytes), "i"(Tile) : "memory");
}
template <int Tile>
inline void tile_store(void* base, int64_t stride_bytes) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride_bytes), "i"(Tile) : "memory");
}
// C += A . B: A is 16 rows x 32 bf16, B is 16 rows of bf16 pairs (VNNI), C fp32.
template <int C, int A, int B>
inline void tile_dpbf16ps() {
  asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
}

// body(std::integral_constant<int, I>) for each I: tile numbers from a loop index.
template <int... I, class Body>
inline void unroll(std::integer_sequence<int, I...>, Body&& body) {
  (body(std::integral_constant<int, I>{}), ...);
}

}  // namespace mhc::kernels::amx
