// The forward's cast tile (gemm_tile-inl.h, CastTileOf) against its stated order:
// per token, u = v * gamma (v without gamma; HF32-rounded when asked) stored, the
// accumulators as the GEMM tile's (one fused multiply-add per vector, ascending,
// onto their value on entry or onto zero) over that u, and the squares' lanes one
// fused multiply-add of v * v per vector onto zero. Bitwise, every tile shape,
// dtype and option.
#include <cmath>

#include "core/dtype.hpp"
#include "kernels/common/hf32.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

using mhc::kernels::common::round_hf32;

struct CastCase {
  DType dtype;
  int tokens, rows;
  int64_t vectors;
  bool gamma, hf32, squares, from_zero;
};

void check_cast_tile(const Microkernels& m, const CastCase& c, uint64_t seed) {
  const int64_t L = m.lanes, columns = c.vectors * L, w_stride = columns + 16, x_stride = columns + 3;
  const int64_t acc_stride = int64_t(c.rows) * L + 2 * L;
  Rng rng(seed);
  // x in its dtype (exact values), each token's row x_stride elements apart.
  std::vector<float> x(size_t(c.tokens * x_stride));
  for (float& v : x) v = rng.uniform(-3, 3);
  std::vector<uint16_t> x16(x.size());
  if (c.dtype != DType::fp32)
    for (size_t i = 0; i < x.size(); ++i) {
      mhc::core::store_element(x16.data(), c.dtype, int64_t(i), x[i]);
      x[i] = mhc::core::load_element(x16.data(), c.dtype, int64_t(i));
    }
  const size_t esize = mhc::core::element_size(c.dtype);
  const char* x_base = c.dtype == DType::fp32 ? reinterpret_cast<const char*>(x.data())
                                              : reinterpret_cast<const char*>(x16.data());
  std::vector<const void*> rows(size_t(c.tokens));
  for (int t = 0; t < c.tokens; ++t) rows[size_t(t)] = x_base + size_t(t * x_stride) * esize;
  std::vector<float> scale(static_cast<size_t>(columns)), w(static_cast<size_t>(c.rows * w_stride));
  for (float& g : scale) g = rng.uniform(0.5f, 1.5f);
  for (float& v : w) v = rng.uniform(-1, 1);
  AlignedFloats u(size_t(c.tokens * m.u_row_floats)), acc(size_t(c.tokens * acc_stride));
  AlignedFloats sq(size_t(c.tokens * L));
  for (float& v : u) v = -7.0f;
  for (float& v : acc) v = rng.uniform(-4, 4);
  for (float& v : sq) v = -7.0f;
  std::vector<float> want_acc = acc.copy(), want_u = u.copy(), want_sq = sq.copy();
  for (int t = 0; t < c.tokens; ++t) {
    for (int64_t l = 0; l < L; ++l) {
      float square = 0.0f;
      for (int64_t i = 0; i < c.vectors; ++i) {
        const int64_t j = i * L + l;
        const float v = x[size_t(t * x_stride + j)];
        square = std::fma(v, v, square);
        float scaled = c.gamma ? v * scale[size_t(j)] : v;
        if (c.hf32) scaled = round_hf32(scaled);
        want_u[size_t(t * m.u_row_floats + j)] = scaled;
      }
      if (c.squares) want_sq[size_t(t * L + l)] = square;
      for (int f = 0; f < c.rows; ++f) {
        float a = c.from_zero ? 0.0f : want_acc[size_t(t * acc_stride + f * L + l)];
        for (int64_t i = 0; i < c.vectors; ++i)
          a = std::fma(want_u[size_t(t * m.u_row_floats + i * L + l)], w[size_t(f * w_stride + i * L + l)], a);
        want_acc[size_t(t * acc_stride + f * L + l)] = a;
      }
    }
  }
  m.cast_tile(c.dtype, c.tokens, c.rows, rows.data(), c.gamma ? scale.data() : nullptr, c.hf32, u.data(), w.data(),
              w_stride, c.vectors, acc.data(), acc_stride, c.from_zero, c.squares ? sq.data() : nullptr);
  for (size_t i = 0; i < u.size(); ++i) ASSERT_EQ(bits(u[i]), bits(want_u[i])) << "u[" << i << "]";
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(bits(acc[i]), bits(want_acc[i])) << "accumulator " << i;
  for (size_t i = 0; i < sq.size(); ++i) ASSERT_EQ(bits(sq[i]), bits(want_sq[i])) << "square lane " << i;
}

TEST(CastTile, EveryShapeDtypeAndOptionFollowsItsOrder) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    ASSERT_GE(m->cast_tile_tokens, 1);
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
      for (int tokens = 1; tokens <= m->cast_tile_tokens; ++tokens)
        for (int rows = 1; rows <= m->tile_rows; ++rows)
          for (int64_t vectors : {1, 3, 16})
            for (int options = 0; options < 16; ++options) {
              const CastCase c{dtype, tokens, rows, vectors, (options & 1) != 0, (options & 2) != 0,
                               (options & 4) != 0, (options & 8) != 0};
              SCOPED_TRACE(std::string(m->target) + " " + mhc::core::dtype_name(dtype) + " " +
                           std::to_string(tokens) + "x" + std::to_string(rows) + " over " + std::to_string(vectors) +
                           " vectors" + (c.gamma ? ", gamma" : "") + (c.hf32 ? ", hf32" : "") +
                           (c.squares ? ", squares" : "") + (c.from_zero ? ", from zero" : ""));
              check_cast_tile(*m, c, uint64_t(tokens * 1000 + rows * 100 + vectors * 16 + options));
            }
  }
}

TEST(CastTile, ZeroVectorsLeaveTheAccumulatorsAndZeroTheSquares) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    check_cast_tile(*m, {DType::bf16, m->cast_tile_tokens, m->tile_rows, 0, true, false, true, false}, 5);
  }
}

}  // namespace
}  // namespace mhc_kernel_test
