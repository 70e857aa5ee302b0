// MhcPre (SPEC §2) with the GEMM m = phi.u on AMX tiles, for bf16 and fp16 x.
//
// Why AMX: the forward's F x K product is the operator's whole arithmetic, and
// one tdpbf16ps does 16 tokens x 32 columns x 16 rows of phi in 16 cycles: 16
// times the fp32 FMA rate of the core. phi is fp32, so the product is taken
// exactly in three bf16 parts (phi_parts.hpp): every product bf16 x bf16 exact,
// the sums in fp32. bf16 x is the tile operand as it lies in memory; fp16 x is
// taken as hi + lo, two bf16 (x_rows.hpp). gamma is folded into phi once per call
// (the SIMD kernels fold it into x instead; both round one product per element).
//
// Per call, forward_prepare packs the parts of phi.gamma in the tiles' pair-
// interleaved (VNNI) layout. Per item (at most kItemTokens tokens, half that for
// long tokens: forward_item_tokens), the k steps run in slices (pre_forward.hpp:
// kStepsPerBlock steps) whose packed phi stays in L2, the item's tokens in groups
// of one or two 16-token tiles. Calls of at most kDecodeTokens tokens (decode) skip
// the packing, swap the operands' roles and share the slices among the workers.
// Each element of m is the same sequence of exact products and fp32 additions
// either way: per slice from zero, step by step, parts of phi hi, mid, lo, within
// each the parts of x hi, lo; then the slices added in order. The squares of x
// go the same way in blocks of kSquareSteps steps. So a token's bits depend on
// its x and phi only: batch invariance.
// Then the finish of the family the registry builds this one on (ForwardItem::finish):
// the per-token outputs and h_in.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/amx/intrinsics.hpp"

#include "kernels/amx/amx.hpp"
#include "kernels/amx/geometry.hpp"
#include "kernels/amx/phi_parts.hpp"
#include "kernels/amx/tiles.hpp"
#include "kernels/amx/transpose.hpp"
#include "kernels/amx/x_rows.hpp"
#include "kernels/common/token_math.hpp"

namespace mhc::kernels::amx {
namespace {

static_assert(kStepsPerBlock * kStep == kSliceColumns, "a block of steps is a slice of the sums");
constexpr int64_t kSquareSteps = kSquareBlockColumns / kStep;

// sum[i] += part[i], i < count.
void add_into(float* sum, const float* part, int64_t count) {
  for (int64_t i = 0; i < count; ++i) sum[i] += part[i];
}

// A slice's sums of one token group: the C tiles as stored, the squares' slice
// lanes, and their current block's.
struct SliceSums {
  float* acc;       // [32][m_stride]
  float* sq;        // [32][16]
  float* sq_block;  // [32][16]
};

// ------------------------------------------------------------------ the tiles

// Tiles: C[tt][ft] = tt * NF + ft, A[tt][q] = TT * NF + XP * tt + q (q: part of x),
// B = TT * NF + XP * TT.
template <int NF, int TT, int XP>
struct Group {
  static constexpr int kA = TT * NF, kB = TT * NF + XP * TT;
  static_assert(kB < 8, "eight tiles");

  static TileConfig config(int width) {
    TileConfig c;
    for (int i = 0; i < TT * NF; ++i) c.rows[i] = 16, c.bytes_per_row[i] = uint16_t(width * 4);
    for (int i = kA; i < kB; ++i) c.rows[i] = 16, c.bytes_per_row[i] = 64;
    c.rows[kB] = 16, c.bytes_per_row[kB] = uint16_t(width * 4);
    return c;
  }

  // Tokens [t, t + count) (count <= 16 TT) over the steps [s0, s1) of one slice,
  // from zero: the C tiles into out.acc (rows of m_stride floats), the lanes of
  // sum(v^2) added into out.sq (rows of 16), block by block. Per element of C: step
  // by step, parts of phi hi, mid, lo, and within each the parts of x hi, lo.
  static void run(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t, int64_t count,
                  int64_t s0, int64_t s1, const SliceSums& out) {
    const int64_t acc_bytes = g.m_stride() * 4, b_bytes = g.width * 4;
    float* acc = out.acc;
    float* sq = out.sq_block;
    unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
      unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) { tile_zero<decltype(tt)::value * NF + decltype(ft)::value>(); });
    });
    // The squares of a step go into the block of kSquareSteps steps it starts or
    // continues; a finished block is added to the slice's lanes.
    const int64_t square_rows = std::min<int64_t>(count, 16 * TT) * 16;
    auto begin_squares = [&](int64_t step) {
      if ((step - s0) % kSquareSteps != 0) return;
      if (step > s0) add_into(out.sq, sq, square_rows);
      std::fill_n(sq, square_rows, 0.0f);
    };
    // fp16: the parts of x are staged a step ahead (two buffers), so the tile
    // loads do not wait for the staging stores to reach L1. Rows that lie at a
    // uniform stride in x are staged a few after each of the step's B tiles, so that
    // a step's 16 rows do not fill the core's reorder buffer at once and a row that
    // misses the caches does not hold up the products (mhc-bench c forward). bf16
    // rows are read by tileloadd from x as they lie: copying them gains nothing
    // (mhc-bench a forward).
    const int64_t rows = std::min<int64_t>(count, 16);
    auto staging_of = [&](int64_t step) { return x.staging + (step & 1) * 2 * 16 * kStep; };
    auto stage = [&](int64_t step) {
      x.stage_fp16(t, rows, step, staging_of(step), staging_of(step) + 16 * kStep, sq);
    };
    begin_squares(s0);
    if constexpr (XP == 2) stage(s0);
    for (int64_t s = s0; s < s1; ++s) {
      const char* next_rows = nullptr;  // fp16: step s + 1's rows in x, staged between the products
      if constexpr (XP == 2) {
        static_assert(TT == 1, "fp16 takes one token tile a group");
        if (s + 1 < s1) begin_squares(s + 1);
        if (s + 1 < s1 && !(next_rows = x.direct_row(t, s + 1))) stage(s + 1);
        tile_load<kA>(staging_of(s), 64);
        tile_load<kA + 1>(staging_of(s) + 16 * kStep, 64);
      } else {
        begin_squares(s);
        unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
          constexpr int i = decltype(tt)::value;
          const int64_t rows = std::clamp<int64_t>(count - 16 * i, 0, 16);
          const auto [base, stride] = x.source(t + 16 * i, rows, s, x.staging + i * 16 * kStep);
          tile_load<kA + i>(base, stride);
          accumulate_squares(base, stride, rows, sq + 16 * 16 * i);
        });
      }
      const uint32_t* step = packed + s * g.step_dwords();
      for (int part = 0; part < kParts; ++part)
        unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
          tile_load<kB>(step + (part * NF + decltype(ft)::value) * g.tile_dwords(), b_bytes);
          unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
            unroll(std::make_integer_sequence<int, XP>{}, [&](auto q) {
              tile_dpbf16ps<decltype(tt)::value * NF + decltype(ft)::value,
                            kA + XP * decltype(tt)::value + decltype(q)::value, kB>();
            });
          });
          if constexpr (XP == 2)
            if (next_rows) {  // after B tile j of the step's 3 NF: rows [rows j / 3 NF, rows (j + 1) / 3 NF)
              const int64_t j = part * NF + decltype(ft)::value;
              x.stage_fp16_rows(next_rows, rows * j / (kParts * NF), rows * (j + 1) / (kParts * NF),
                                staging_of(s + 1), staging_of(s + 1) + 16 * kStep, sq);
            }
        });
    }
    add_into(out.sq, sq, square_rows);
    unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
      unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
        tile_store<decltype(tt)::value * NF + decltype(ft)::value>(
            acc + decltype(tt)::value * 16 * g.m_stride() + decltype(ft)::value * g.width, acc_bytes);
      });
    });
  }
};

// m of the item's tokens [t0, t1) added into acc (rows of m_stride) and the lanes
// of their sums of squares into sq, slice by slice, for one shape of tiles.
template <int NF, int TT, int XP>
void item_gemm(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t0, int64_t t1, float* acc,
               float* sq, const SliceSums& slice) {
  const TileConfig config = Group<NF, TT, XP>::config(g.width);
  load_config(config);
  const int64_t group = 16 * TT;
  for (int64_t s0 = 0; s0 < g.steps; s0 += kStepsPerBlock) {
    const int64_t s1 = std::min(g.steps, s0 + kStepsPerBlock);
    for (int64_t t = t0; t < t1; t += group) {
      const int64_t count = std::min(group, t1 - t);
      std::fill_n(slice.sq, count * 16, 0.0f);
      Group<NF, TT, XP>::run(g, x, packed, t, count, s0, s1, slice);
      add_into(acc + (t - t0) * g.m_stride(), slice.acc, count * g.m_stride());
      add_into(sq + (t - t0) * 16, slice.sq, count * 16);
    }
  }
  release_tiles();
}

template <int XP>
void gemm_parts(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t0, int64_t t1, float* acc,
                float* sq, const SliceSums& slice) {
  if constexpr (XP == 1) {  // tokens in groups of two 16-token tiles when they fit, the item's odd last tile alone
    const int64_t paired = g.token_tiles == 2 ? (t1 - t0) / 32 * 32 : 0;
    if (paired > 0) {
      if (g.f_tiles == 1) item_gemm<1, 2, 1>(g, x, packed, t0, t0 + paired, acc, sq, slice);
      else item_gemm<2, 2, 1>(g, x, packed, t0, t0 + paired, acc, sq, slice);
    }
    acc += paired * g.m_stride(), sq += paired * 16, t0 += paired;
    if (t0 == t1) return;
  }
  switch (g.f_tiles) {
    case 1: return item_gemm<1, 1, XP>(g, x, packed, t0, t1, acc, sq, slice);
    case 2: return item_gemm<2, 1, XP>(g, x, packed, t0, t1, acc, sq, slice);
    case 3: return item_gemm<3, 1, XP>(g, x, packed, t0, t1, acc, sq, slice);
    case 4: return item_gemm<4, 1, XP>(g, x, packed, t0, t1, acc, sq, slice);
    case 5: return item_gemm<5, 1, XP>(g, x, packed, t0, t1, acc, sq, slice);
    default:
      if constexpr (XP == 1) return item_gemm<6, 1, 1>(g, x, packed, t0, t1, acc, sq, slice);
  }
}

void gemm(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t0, int64_t t1, float* acc,
          float* sq, const SliceSums& slice) {
  if (g.x_parts == 1) gemm_parts<1>(g, x, packed, t0, t1, acc, sq, slice);
  else gemm_parts<2>(g, x, packed, t0, t1, acc, sq, slice);
}

// m of token t one product at a time, in SPEC's order (phi times v*gamma), for a
// token where a bf16 part that is exactly 0 (or a subnormal bf16 x, which the
// tiles flush to 0) may meet Inf: 0 x Inf would give NaN where the reference has
// Inf, and phi*gamma folded may overflow or underflow where SPEC's order does
// not. (The token's outputs are Inf or NaN either way; this keeps which.) A
// token's own data, or phi's, decides, so batch invariance holds.
void token_m_scalar(const ForwardOperands& o, int64_t t, float* m) {
  const PreShape& d = o.shape;
  for (int64_t f = 0; f < d.F; ++f) {
    float sum = 0.0f;
    for (int64_t k = 0; k < d.K; ++k) {
      const int64_t n = k / d.D, j = k % d.D;
      float u = core::load_element(o.x.data, d.x_dtype, o.x.at(t, n) + j);
      if (o.gamma.present()) u *= o.gamma.row(n)[j];
      sum += o.phi.row(f)[k] * u;
    }
    m[f] = sum;
  }
}

// ------------------------------------------------------------------ a few tokens

// A call of at most kDecodeTokens tokens (decode) takes the same products with the
// operands' roles swapped: A = phi.gamma in parts (16 rows of phi, split step by
// step into L1), B = x (pairs of columns, one column per token), C = 16 rows of
// phi x up to kFewTokens tokens (longer calls: group after group). Packing phi
// for B tiles once per call would cost a decode step several times its arithmetic. Every element of C is the same sequence of
// exact pair products and fp32 additions as in the packed path (per slice from
// zero, step by step, parts of phi hi, mid, lo, within each the parts of x), so a
// token's bits do not depend on its batch's size (the batch invariance tests
// compare the two). The slices are independent: forward_prepare's parts take them
// in shares (each part's slices then meet phi in its own core's L2, call after
// call), and forward_tokens adds them in order.
struct FewStaging {
  static constexpr int kGroups = int(kDecodeTokens / kFewTokens);  // most token groups of a pass
  alignas(64) uint16_t a[2 * kMaxFTiles * kParts * 16 * kStep];  // [2][tile][part][16][32]: rows of phi.gamma, two steps
  alignas(64) uint32_t b[2 * kGroups * 2 * 16 * kFewTokens];    // [2][group][x part][16][cols]: pairs of x, two steps
  alignas(64) float c[16 * kFewTokens];                          // a C tile
  alignas(64) uint16_t row[3 * kStep];                           // a row of x copied, and its parts (fp16)
  alignas(64) float sq_block[kDecodeTokens * 16];                // the squares' current block, per token
  uint32_t* b_tile(int buf, int group, int q) { return b + ((buf * kGroups + group) * 2 + q) * 16 * kFewTokens; }
  uint16_t* a_tile(int buf, int tile, int part) { return a + ((buf * kMaxFTiles + tile) * kParts + part) * 16 * kStep; }
};

// The pairs of x of tokens [t0, t0 + n) (n <= 16) at step s as the B tiles of
// `cols` columns (>= n, the rest zero), one per part of x: 16 rows of cols dwords;
// the rows' squares added into sq (rows of 16) as accumulate_squares and
// fp16_parts add them.
__attribute__((target("avx512f,avx512bw"))) void stage_x_pairs(const Geometry& g, const XSource& x, int64_t t0,
                                                                int64_t n, int64_t cols, int64_t s, uint16_t* row,
                                                                uint32_t* b0, uint32_t* b1, float* sq) {
  __m512i rows[2][16];
  const XSource::Step at = x.step(s);
  for (int c = 0; c < 16; ++c) {
    rows[0][c] = rows[1][c] = _mm512_setzero_si512();
    if (c >= n) continue;
    const void* from = x.row(at, t0 + c, s, row);
    if (g.x_parts == 1) {
      rows[0][c] = _mm512_loadu_si512(from);
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(rows[0][c], 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(rows[0][c], _mm512_set1_epi32(int(0xffff0000u))));
      __m512 acc = _mm512_load_ps(sq + 16 * c);
      acc = _mm512_fmadd_ps(even, even, acc);
      acc = _mm512_fmadd_ps(odd, odd, acc);
      _mm512_store_ps(sq + 16 * c, acc);
    } else {
      fp16_parts(from, row + kStep, row + 2 * kStep, sq + 16 * c);
      rows[0][c] = _mm512_loadu_si512(row + kStep), rows[1][c] = _mm512_loadu_si512(row + 2 * kStep);
    }
  }
  uint32_t* b[2] = {b0, b1};
  for (int q = 0; q < g.x_parts; ++q) {
    if (cols == 1) {  // one token: its row is the tile, a pair a row
      _mm512_storeu_si512(b[q], rows[q][0]);
      continue;
    }
    transpose16(rows[q]);
    const __mmask16 columns = __mmask16((1u << cols) - 1);
    for (int r = 0; r < 16; ++r) _mm512_mask_storeu_epi32(b[q] + r * cols, columns, rows[q][r]);
  }
}

// Everything step s needs, into staging buffer `buf`: the rows of phi.gamma in
// parts for C tiles [0, tiles), and each group's pairs of x. Staged a step ahead of
// the products that read them, so the tile loads do not wait for these stores to
// reach L1. False if phi.gamma there is not finite.
bool stage_step(const ForwardOperands& o, const Geometry& g, const XSource& x, int64_t t0, int64_t n, int64_t cols,
                int tiles, int64_t s, FewStaging& st, int buf) {
  for (int64_t group = 0; group * kFewTokens < n; ++group)
    stage_x_pairs(g, x, t0 + group * kFewTokens, std::min(kFewTokens, n - group * kFewTokens), cols, s, st.row,
                  st.b_tile(buf, int(group), 0), st.b_tile(buf, int(group), 1), st.sq_block + group * kFewTokens * 16);
  bool finite = true;
  for (int i = 0; i < tiles; ++i) finite = stage_phi_rows(o, g, i, s, st.a_tile(buf, i, 0)) && finite;
  return finite;
}

// One slice's m (steps [s0, s1), from zero) of tokens [t0, t0 + n), n <= 16 G, in
// groups of kFewTokens (cols columns each: n when n <= 16) into m (rows of
// m_stride), and their squares' slice lanes into sq (rows of 16), in blocks of
// kSquareSteps steps as the packed path sums them. Tiles: C (group j, tile i) at
// NC j + i, A at NC G, B (one per part of x) after it; C and A tiles of g.width
// rows (rows of phi).
template <int NC, int XP, int G>
bool few_tokens_pass(const ForwardOperands& o, const Geometry& g, const XSource& x, int64_t t0, int64_t n,
                     int64_t s0, int64_t s1, float* m, float* sq, FewStaging& st) {
  constexpr int kA = NC * G, kB = kA + 1;
  static_assert(kB + XP <= 8, "eight tiles");
  const PreShape& d = o.shape;
  const int64_t cols = std::min(n, kFewTokens), groups = (n + kFewTokens - 1) / kFewTokens;
  TileConfig config;
  for (int i = 0; i < kA; ++i) config.rows[i] = uint8_t(g.width), config.bytes_per_row[i] = uint16_t(4 * cols);
  config.rows[kA] = uint8_t(g.width), config.bytes_per_row[kA] = 64;
  for (int q = 0; q < XP; ++q) config.rows[kB + q] = 16, config.bytes_per_row[kB + q] = uint16_t(4 * cols);
  load_config(config);
  unroll(std::make_integer_sequence<int, kA>{}, [&](auto i) { tile_zero<decltype(i)::value>(); });
  std::fill_n(sq, n * 16, 0.0f);
  auto stage = [&](int64_t step) {  // a step's staging; a block of squares ends before it
    if ((step - s0) % kSquareSteps == 0) {
      if (step > s0) add_into(sq, st.sq_block, n * 16);
      std::fill_n(st.sq_block, n * 16, 0.0f);
    }
    return stage_step(o, g, x, t0, n, cols, NC, step, st, int(step & 1));
  };
  bool phi_finite = stage(s0);
  for (int64_t s = s0; s < s1; ++s) {
    if (s + 1 < s1) phi_finite = stage(s + 1) && phi_finite;
    const int buf = int(s & 1);
    unroll(std::make_integer_sequence<int, G>{}, [&](auto j) {
      constexpr int group = decltype(j)::value;
      if (group >= groups) return;
      unroll(std::make_integer_sequence<int, XP>{}, [&](auto q) {
        tile_load<kB + decltype(q)::value>(st.b_tile(buf, group, decltype(q)::value), 4 * cols);
      });
      unroll(std::make_integer_sequence<int, NC>{}, [&](auto i) {
        constexpr int c = group * NC + decltype(i)::value;
        for (int part = 0; part < kParts; ++part) {
          tile_load<kA>(st.a_tile(buf, decltype(i)::value, part), 64);
          unroll(std::make_integer_sequence<int, XP>{}, [&](auto q) { tile_dpbf16ps<c, kA, kB + decltype(q)::value>(); });
        }
      });
    });
  }
  add_into(sq, st.sq_block, n * 16);
  unroll(std::make_integer_sequence<int, G>{}, [&](auto j) {
    constexpr int group = decltype(j)::value;
    if (group >= groups) return;
    const int64_t tokens = std::min(kFewTokens, n - group * kFewTokens);
    unroll(std::make_integer_sequence<int, NC>{}, [&](auto i) {
      constexpr int tile = decltype(i)::value;
      tile_store<group * NC + tile>(st.c, 4 * cols);
      for (int r = 0; r < g.width && tile * g.width + r < d.F; ++r)
        for (int64_t t = 0; t < tokens; ++t)
          m[(group * kFewTokens + t) * g.m_stride() + tile * g.width + r] = st.c[r * cols + t];
    });
  });
  release_tiles();
  return phi_finite;
}

// One slice's m of tokens [t0, t0 + n), n <= kDecodeTokens, in passes of as many
// groups as the tiles hold. Returns whether phi.gamma was finite there.
bool few_tokens(const ForwardOperands& o, const Geometry& g, const XSource& x, int64_t t0, int64_t n, int64_t s0,
                int64_t s1, float* m, float* sq, FewStaging& st) {
  auto passes = [&]<int NC, int XP>() {
    constexpr int G = std::min<int>(FewStaging::kGroups, (7 - XP) / NC);  // NC G C tiles, an A, XP B
    bool finite = true;
    for (int64_t p = 0; p < n; p += G * kFewTokens)
      finite = few_tokens_pass<NC, XP, G>(o, g, x, t0 + p, std::min<int64_t>(G * kFewTokens, n - p), s0, s1,
                                          m + p * g.m_stride(), sq + p * 16, st) && finite;
    return finite;
  };
  // forward_uses_tiles admits at most 6 C tiles (bf16 x) or 5 (fp16 x, one B tile more).
  auto run = [&]<int XP>() {
    switch (g.f_tiles) {
      case 1: return passes.template operator()<1, XP>();
      case 2: return passes.template operator()<2, XP>();
      case 3: return passes.template operator()<3, XP>();
      case 4: return passes.template operator()<4, XP>();
      case 5: return passes.template operator()<5, XP>();
      default:
        if constexpr (XP == 1) return passes.template operator()<6, 1>();
        return false;
    }
  };
  return g.x_parts == 1 ? run.template operator()<1>() : run.template operator()<2>();
}

// The worker's scratch for one item.
struct ItemScratch {
  float* acc;          // [kItemTokens][m_stride] m, the slices' C tiles added
  float* sq;           // [kItemTokens][16] lanes of sum(v^2)
  uint16_t* staging;   // [4][16][32] bf16: A tiles copied from x (bf16: 2 token tiles; fp16: 2 steps x 2 parts)
  uint16_t* row;       // [3][32] bf16: a row of x copied, and its parts (fp16)
  SliceSums slice;     // one token group's slice
  float* h_pre;        // [N]
};
constexpr int64_t kAccFloats = kItemTokens * 16 * kMaxFTiles, kSqFloats = kItemTokens * 16,
                  kStagingFloats = 4 * 16 * kStep / 2, kRowFloats = 3 * kStep / 2;

ItemScratch lay_out(float* base) {
  ItemScratch s;
  float* at = base;
  auto take = [&](int64_t floats) { float* p = at; at += align16(floats); return p; };
  s.acc = take(kAccFloats);
  s.sq = take(kSqFloats);
  s.staging = reinterpret_cast<uint16_t*>(take(kStagingFloats));
  s.row = reinterpret_cast<uint16_t*>(take(kRowFloats));
  s.slice.acc = take(32 * 16 * kMaxFTiles);
  s.slice.sq = take(32 * 16);
  s.slice.sq_block = take(32 * 16);
  s.h_pre = at;  // [N], last
  return s;
}

// The once-per-call operands: packed phi.gamma (more than kDecodeTokens tokens) or
// the few tokens' m and squares' lanes per slice (computed by the preparation's
// parts, a share of the slices each).
struct DecodeSlices {
  float* m;   // [slices][T][m_stride]
  float* sq;  // [slices][T][16]
};
DecodeSlices decode_slices(void* prepared, const PreShape& d) {
  float* base = static_cast<float*>(prepared);
  return {base, base + align16(slice_count(d.K) * d.T * geometry(d).m_stride())};
}
int64_t prepared_floats(const PreShape& d) {
  const Geometry g = geometry(d);
  if (d.T > kDecodeTokens) return align16(g.steps * g.step_dwords());
  return align16(slice_count(d.K) * d.T * g.m_stride()) + slice_count(d.K) * d.T * 16;
}

}  // namespace

// bf16 x with F <= 96, fp16 x (two parts: one A tile more) with F <= 80.
bool forward_uses_tiles(const PreShape& d) {
  if (d.K == 0 || d.hf32) return false;
  if (d.x_dtype == DType::bf16) return d.F <= 16 * kMaxFTiles;
  return d.x_dtype == DType::fp16 && d.F <= 16 * (kMaxFTiles - 1);
}

int64_t forward_item_tokens(const PreShape& d) {
  if (d.T <= kDecodeTokens) return 8;  // the items only finish: a few tokens each
  const int64_t item_x_bytes = kItemTokens * d.K * core::element_size(d.x_dtype);
  return item_x_bytes <= kItemXBytes ? kItemTokens : kItemTokens / 2;
}

int64_t forward_prepared_bytes(const PreShape& d) {
  if (d.T == 0) return 0;
  return prepared_floats(d) * int64_t(sizeof(float));
}

int64_t forward_scratch_floats(const PreShape& d) {
  return align16(kAccFloats) + align16(kSqFloats) + align16(kStagingFloats) + align16(kRowFloats) +
         align16(32 * 16 * kMaxFTiles) + 2 * align16(32 * 16) + align16(d.N);
}

// Calls of more than kDecodeTokens pack phi.gamma alone (pack_steps); fewer tokens'
// preparation forms x's sums.
bool forward_prepare_reads_weights_only(const PreShape& d) { return d.T > kDecodeTokens; }

bool forward_prepare(const ForwardOperands& o, void* prepared, int64_t part, int64_t parts, float* /*scratch*/) {
  const Geometry g = geometry(o.shape);
  bool finite = true;
  if (o.shape.T <= kDecodeTokens) {  // this part's share of the slices, for every token
    const int64_t slices = slice_count(o.shape.K), first = slices * part / parts, end = slices * (part + 1) / parts;
    if (end > first) {
      FewStaging staging;  // 50 KiB on the worker's stack
      if (int64_t(g.f_tiles) * g.width > o.shape.F)  // the last tile's rows past F stay zero
        std::memset(staging.a, 0, sizeof staging.a);
      XSource x{&o, false, 0, nullptr, nullptr};
      const DecodeSlices out = decode_slices(prepared, o.shape);
      for (int64_t slice = first; slice < end; ++slice)
        finite = few_tokens(o, g, x, 0, o.shape.T, slice * kStepsPerBlock,
                            std::min(g.steps, (slice + 1) * kStepsPerBlock), out.m + slice * o.shape.T * g.m_stride(),
                            out.sq + slice * o.shape.T * 16, staging) && finite;
    }
  } else {
    finite = pack_steps(o, g, g.steps * part / parts, g.steps * (part + 1) / parts,
                        static_cast<uint32_t*>(prepared));
  }
  return finite;
}

void forward_tokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  const ForwardOperands& o = *item.operands;
  const PreShape& d = o.shape;
  const Geometry g = geometry(d);
  const ItemScratch s = lay_out(item.scratch);
  // Padding rows start at zero; later they may hold earlier groups' rows, which
  // reach only C rows past the item's tokens (a row of C depends on its row of A).
  std::memset(s.staging, 0, 4 * 16 * kStep * sizeof(uint16_t));
  std::fill_n(s.sq, (t1 - t0) * 16, 0.0f);
  float* m = s.acc;
  std::fill_n(m, (t1 - t0) * g.m_stride(), 0.0f);
  XSource x{&o, x_direct(o), 2 * o.x.token_stride, s.staging, s.row};
  if (d.T <= kDecodeTokens) {  // m and the squares from the preparation's slices, added in order
    const DecodeSlices slices = decode_slices(item.prepared->data, d);
    for (int64_t slice = 0; slice < slice_count(d.K); ++slice) {
      add_into(m, slices.m + (slice * d.T + t0) * g.m_stride(), (t1 - t0) * g.m_stride());
      add_into(s.sq, slices.sq + (slice * d.T + t0) * 16, (t1 - t0) * 16);
    }
  } else {
    gemm(g, x, static_cast<const uint32_t*>(item.prepared->data), t0, t1, m, s.sq, s.slice);
  }
  // One product at a time, in SPEC's order, where a bf16 part that is exactly 0
  // (or a bf16 x that the tiles flush to 0) may meet Inf: x not finite (its sum of
  // squares tells), or phi.gamma not finite.
  const bool all_scalar = !item.prepared->all_finite();
  for (int64_t t = t0; t < t1; ++t) {
    float lanes[16];
    std::copy_n(s.sq + (t - t0) * 16, 16, lanes);
    if (all_scalar || !std::isfinite(common::fold16(lanes))) token_m_scalar(o, t, m + (t - t0) * g.m_stride());
  }
  item.finish(o, t0, t1, m, g.m_stride(), s.sq, s.h_pre);
}

const PreForwardKernels kPreForward = {.scratch_floats = forward_scratch_floats,
                                       .tokens = forward_tokens,
                                       .item_tokens = forward_item_tokens,
                                       .prepared_bytes = forward_prepared_bytes,
                                       .prepare = forward_prepare,
                                       .prepare_reads_weights_only = forward_prepare_reads_weights_only,
                                       .applies = forward_uses_tiles};

}  // namespace mhc::kernels::amx
