// The backward's column microkernel (strip_block-inl.h) against its stated
// order, bitwise: per row r, sums[r] = fused G[t][r] v[t] over t ascending, added
// once to totals[r]; gu of a token = its entry value (zero for the first block)
// plus the even rows' fused chain plus the odd rows'; the last block adds
// fused v*gu per token to the strip's sum and leaves y = c v + gamma gu. With a
// u tile (HF32 calls) the sums of G take u instead of v; nothing else changes.
#include "core/dtype.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

struct StripBlockCase {
  int rows;
  bool last, first;
  DType dtype;
  int64_t tokens, width;
  bool u_tile = false;
};

void run_case(const Microkernels& m, const StripBlockCase& c, uint64_t seed) {
  const int64_t L = m.lanes, F = c.rows + 5, f0 = 3, v_row = L + 7, total_stride = L + 9;
  Rng rng(seed);
  std::vector<float> G(size_t(c.tokens * F)), phi(size_t(c.rows * L)), c_chunk(size_t(c.tokens)), gamma(static_cast<size_t>(L));
  for (float& v : G) v = rng.uniform(-1, 1);
  for (float& v : phi) v = rng.uniform(-1, 1);
  for (float& v : c_chunk) v = rng.uniform(-1, 1);
  for (float& v : gamma) v = rng.uniform(0.5f, 1.5f);
  std::vector<const float*> phi_rows(size_t(c.rows));
  for (int r = 0; r < c.rows; ++r) phi_rows[size_t(r)] = phi.data() + r * L;
  // v in x's dtype, and as fp32
  std::vector<float> v32(size_t(c.tokens * v_row));
  std::vector<uint32_t> v_store(size_t(c.tokens * v_row));
  for (int64_t i = 0; i < int64_t(v32.size()); ++i) {
    mhc::core::store_element(v_store.data(), c.dtype, i, rng.uniform(-2, 2));
    v32[size_t(i)] = mhc::core::load_element(v_store.data(), c.dtype, i);
  }
  AlignedFloats gu(size_t(c.tokens * m.token_floats)), u(size_t(c.tokens * m.token_floats));
  for (float& v : u) v = rng.uniform(-2, 2);
  // What the sums of G take: v, or the u tile.
  auto operand = [&](int64_t t, int64_t l) { return c.u_tile ? u[size_t(t * m.token_floats + l)] : v32[size_t(t * v_row + l)]; };
  std::vector<float> totals(size_t((f0 + c.rows) * total_stride)), gamma_total(static_cast<size_t>(L));
  for (float& v : gu) v = rng.uniform(-1, 1);
  for (float& v : totals) v = rng.uniform(-1, 1);
  for (float& v : gamma_total) v = rng.uniform(-1, 1);
  std::vector<float> want_gu = gu.copy(), want_totals = totals, want_gamma_total = gamma_total;

  for (int64_t l = 0; l < L; ++l) {
    float gamma_sum = 0.0f;
    for (int64_t t = 0; t < c.tokens; ++t) {
      const float v = v32[size_t(t * v_row + l)];
      float even = c.first ? 0.0f : gu[size_t(t * m.token_floats + l)], odd = 0.0f;
      for (int r = 0; r < c.rows; ++r) {
        const float g = G[size_t(t * F + f0 + r)];
        if (r % 2 == 0) even = std::fma(g, phi[size_t(r * L + l)], even);
        else odd = std::fma(g, phi[size_t(r * L + l)], odd);
      }
      const float g_u = even + odd;
      if (c.last) {
        gamma_sum = std::fma(v, g_u, gamma_sum);
        want_gu[size_t(t * m.token_floats + l)] = std::fma(c_chunk[size_t(t)], v, gamma[size_t(l)] * g_u);
      } else {
        want_gu[size_t(t * m.token_floats + l)] = g_u;
      }
    }
    if (l < c.width) {
      for (int r = 0; r < c.rows; ++r) {
        float sum = 0.0f;
        for (int64_t t = 0; t < c.tokens; ++t) sum = std::fma(G[size_t(t * F + f0 + r)], operand(t, l), sum);
        want_totals[size_t((f0 + r) * total_stride + l)] += sum;
      }
      if (c.last) want_gamma_total[size_t(l)] += gamma_sum;
    }
  }
  m.strip_block(c.rows, c.last, c.dtype, G.data(), F, c.tokens, f0, phi_rows.data(), v_store.data(), v_row, gu.data(),
                c.first, c.width, totals.data(), total_stride, c_chunk.data(), gamma.data(), gamma_total.data(),
                c.u_tile ? u.data() : nullptr);
  for (size_t i = 0; i < gu.size(); ++i) {
    if (int64_t(i % size_t(m.token_floats)) >= L) continue;  // the tile's padding is not the kernel's
    ASSERT_EQ(bits(gu[i]), bits(want_gu[i])) << "gu " << i;
  }
  for (size_t i = 0; i < totals.size(); ++i) ASSERT_EQ(bits(totals[i]), bits(want_totals[i])) << "totals " << i;
  for (size_t i = 0; i < gamma_total.size(); ++i)
    ASSERT_EQ(bits(gamma_total[i]), bits(want_gamma_total[i])) << "gamma_total " << i;
}

TEST(StripBlock, EveryRowCountFollowsItsOrder) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (int rows = 1; rows <= m->block_rows; ++rows)
      for (bool last : {false, true})
        for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
          SCOPED_TRACE(std::string(m->target) + " rows " + std::to_string(rows) + (last ? " last " : " ") +
                       mhc::core::dtype_name(dtype));
          run_case(*m, {rows, last, rows % 2 == 1, dtype, 37, m->lanes}, uint64_t(rows * 4 + last));
        }
  }
}

TEST(StripBlock, AUTileIsWhatTheSumsOfGTake) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (int rows : {1, m->block_rows})
      for (bool last : {false, true})
        run_case(*m, {rows, last, true, DType::fp16, 29, m->lanes, true}, uint64_t(100 + rows + last));
  }
}

TEST(StripBlock, PartialStripAddsOnlyItsColumnsToTheTotals) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (int64_t width : {int64_t(1), int64_t(m->lanes - 1)})
      run_case(*m, {m->block_rows, true, true, DType::bf16, 64, width}, uint64_t(width));
  }
}

}  // namespace
}  // namespace mhc_kernel_test
