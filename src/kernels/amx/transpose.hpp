// A 16 x 16 matrix of dwords transposed in AVX-512 registers: pairs of bf16 turned
// between a tile's rows and its columns (packed phi; the decode path's x).
#pragma once

#include "kernels/amx/intrinsics.hpp"

namespace mhc::kernels::amx {

// rows[i] := column i of the 16 x 16 dword matrix whose rows were rows[i].
__attribute__((target("avx512f"))) inline void transpose16(__m512i rows[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4q + j]: 128-bit lane l holds dword j..j of rows 4q..4q+3 at column 4l + j.
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    rows[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    rows[8 + j] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    rows[4 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    rows[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

}  // namespace mhc::kernels::amx
