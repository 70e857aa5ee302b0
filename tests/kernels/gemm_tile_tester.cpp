// The forward's GEMM tile (gemm_tile-inl.h) against its stated order: lane l of
// acc[t][f] takes u[t][i L + l] * w[f][i L + l] as one fused multiply-add per
// vector i, ascending, from its value on entry (from zero when asked). Bitwise,
// every tile shape.
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

class GemmTileTester {
 public:
  GemmTileTester& tokens(int v) { tokens_ = v; return *this; }
  GemmTileTester& rows(int v) { rows_ = v; return *this; }
  GemmTileTester& vectors(int64_t v) { vectors_ = v; return *this; }
  GemmTileTester& w_stride_pad(int64_t v) { w_pad_ = v; return *this; }
  GemmTileTester& from_zero(bool v) { from_zero_ = v; return *this; }

  void Test(const Microkernels& m, uint64_t seed) const {
    const int64_t L = m.lanes, columns = vectors_ * L, w_stride = columns + w_pad_;
    const int64_t acc_stride = int64_t(rows_) * L + 3 * L;  // tokens' accumulators need not be adjacent
    Rng rng(seed);
    AlignedFloats u(size_t(tokens_ * m.u_row_floats)), acc(size_t(tokens_ * acc_stride));
    std::vector<float> w(size_t(rows_ * w_stride));
    for (float& x : u) x = rng.uniform(-2, 2);
    for (float& x : w) x = rng.uniform(-1, 1);
    for (float& x : acc) x = rng.uniform(-4, 4);
    std::vector<float> want = acc.copy();
    for (int t = 0; t < tokens_; ++t)
      for (int f = 0; f < rows_; ++f)
        for (int64_t l = 0; l < L; ++l) {
          float a = from_zero_ ? 0.0f : want[size_t(t * acc_stride + f * L + l)];
          for (int64_t i = 0; i < vectors_; ++i)
            a = std::fma(u[size_t(t * m.u_row_floats + i * L + l)], w[size_t(f * w_stride + i * L + l)], a);
          want[size_t(t * acc_stride + f * L + l)] = a;
        }
    m.gemm_tile(tokens_, rows_, u.data(), w.data(), w_stride, vectors_, acc.data(), acc_stride, from_zero_);
    for (size_t i = 0; i < acc.size(); ++i)
      ASSERT_EQ(bits(acc[i]), bits(want[i])) << m.target << " tile " << tokens_ << "x" << rows_ << " over "
                                             << vectors_ << " vectors" << (from_zero_ ? " from zero" : "")
                                             << ": accumulator " << i;
  }

 private:
  int tokens_ = 1, rows_ = 1;
  int64_t vectors_ = 1, w_pad_ = 0;
  bool from_zero_ = false;
};

TEST(GemmTile, EveryTileShapeFollowsItsOrder) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (int tokens = 1; tokens <= m->tile_tokens; ++tokens)
      for (int rows = 1; rows <= m->tile_rows; ++rows)
        for (int64_t vectors : {1, 3, 16})
          for (bool from_zero : {false, true})
            GemmTileTester().tokens(tokens).rows(rows).vectors(vectors).w_stride_pad(16).from_zero(from_zero).Test(
                *m, uint64_t(tokens * 100 + rows * 10 + vectors));
  }
}

TEST(GemmTile, ZeroVectorsLeaveTheAccumulators) {
  MHC_FOR_EACH_SIMD_TARGET(m) { GemmTileTester().tokens(m->tile_tokens).rows(m->tile_rows).vectors(0).Test(*m, 7); }
}

TEST(GemmTile, ZeroVectorsFromZeroZeroTheAccumulators) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    GemmTileTester().tokens(m->tile_tokens).rows(m->tile_rows).vectors(0).from_zero(true).Test(*m, 8);
  }
}

}  // namespace
}  // namespace mhc_kernel_test
