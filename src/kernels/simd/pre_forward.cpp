// SIMD MhcPre (SPEC §2) for one Highway target, compiled for each by foreach_target.
//
// A work item is up to kTokensPerItem tokens. The item's m = phi.u is a small
// GEMM [tokens x K] . [K x F] done in passes of at most kRowsPerPass rows of phi
// and slices of kSliceColumns columns (pre_forward.hpp): each slice of u (cast to
// fp32, times gamma) is formed once per pass and stays in cache while every
// micro-tile of kTileTokens tokens x kTileRows rows runs over it, register-blocked,
// a block of kPanelColumns columns at a time: one tile's rows of phi over the block
// are copied (a panel) to stay in L1 while every token tile runs over them, or,
// for weights prepared once, read from the panels the handle keeps (an item of
// one token tile reads phi in place, over the whole slice). Where D is a
// multiple of kSquareBlockColumns the first row tile of each panel forms that
// panel's u as it runs (CastTile), else the slice is cast before its tiles. Each
// slice's lane sums start from zero and are added to the item's totals
// in slice order; the totals are folded once at the end, so a token's bits depend
// on K and its own data only (batch invariance). Calls of at most kDecodeTokens
// tokens (decode) share the slices among the workers instead (the preparation),
// each slice's lane sums kept apart, and then add them in the same order per token.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/pre_forward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <cstdint>

#include "hwy/cache_control.h"  // FlushStream
#include "hwy/highway.h"
#include "kernels/common/token_math.hpp"
#include "kernels/simd/simd.hpp"
#include "kernels/simd/gemm_tile-inl.h"
#include "kernels/simd/token_rows-inl.h"
#include "kernels/simd/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {

// Columns per block, and the panel's row stride (padded as u's). phi's own rows are
// K floats apart, a multiple of 4 KiB for the usual K: read in place, every row's
// line sits in one L1 set and each tile fetches them from L2 again. A panel of one
// tile's rows (not a block of all rows) lets each tile run twice as many column
// vectors per load and store of its accumulators (mhc-bench decode on avx512, T=16
// and T=64).
constexpr int64_t kPanelColumns = 512, kPanelStride = kPanelColumns + 16;

// phi laid out in panels once (ForwardOperands::phi_panels, weights prepared once):
// per tile of rows (kTileRows rows from f0 + fr, each pass's tiles in order), per
// block of kPanelColumns columns of phi's whole vectors, the tile's rows
// kPanelStride floats apart, as SliceSums would copy them.
constexpr int64_t kTilesPerPass = (kRowsPerPass + kTileRows - 1) / kTileRows;
static int64_t PanelBlocks(const PreShape& d) {
  const int64_t L = hn::Lanes(DF());
  return (d.K / L * L + kPanelColumns - 1) / kPanelColumns;
}
static int64_t PanelTile(int64_t f0, int64_t fr) { return f0 / kRowsPerPass * kTilesPerPass + fr / kTileRows; }
// Where the panel of the tile at f0 + fr and the block at column c0 starts (floats).
static int64_t PanelAt(const PreShape& d, int64_t f0, int64_t fr, int64_t c0) {
  return (PanelTile(f0, fr) * PanelBlocks(d) + c0 / kPanelColumns) * kTileRows * kPanelStride;
}
int64_t PhiPanelsBytes(const PreShape& d) {
  const int64_t last_f0 = (d.F - 1) / kRowsPerPass * kRowsPerPass;
  const int64_t tiles = PanelTile(last_f0, d.F - 1 - last_f0) + 1;
  return tiles * PanelBlocks(d) * kTileRows * kPanelStride * int64_t(sizeof(float));
}
// tile_rows rows of phi (phi_rs apart) over columns [c0, c1), whole vectors, into
// a panel: what SliceSums copies at each call, and what a handle keeps.
static void CopyPanel(const float* phi_rows, int64_t phi_rs, int tile_rows, int64_t c0, int64_t c1, float* panel) {
  const DF df;
  for (int f = 0; f < tile_rows; ++f)
    for (int64_t k = c0; k < c1; k += hn::Lanes(df))
      hn::Store(hn::LoadU(df, phi_rows + f * phi_rs + k), df, panel + f * kPanelStride + (k - c0));
}
void LayOutPhiPanels(const ForwardOperands& o, float* panels) {
  const PreShape& d = o.shape;
  const int64_t K_full = d.K / int64_t(hn::Lanes(DF())) * int64_t(hn::Lanes(DF()));
  std::fill_n(panels, PhiPanelsBytes(d) / int64_t(sizeof(float)), 0.0f);
  for (int64_t f0 = 0; f0 < d.F; f0 += kRowsPerPass) {
    const int64_t rows = std::min(kRowsPerPass, d.F - f0);
    for (int64_t fr = 0; fr < rows; fr += kTileRows)
      for (int64_t c0 = 0; c0 < K_full; c0 += kPanelColumns)
        CopyPanel(o.phi.data + (f0 + fr) * o.phi.row_stride, o.phi.row_stride, int(std::min<int64_t>(kTileRows, rows - fr)),
                  c0, std::min(K_full, c0 + kPanelColumns), panels + PanelAt(d, f0, fr, c0));
  }
}

// CastChunk prefetches the row of the token this many ahead, so that the row has
// arrived when the cast reaches it (mhc-bench a and d forward, MHC_ISA=avx512).
constexpr int64_t kCastAhead = 4;

struct ForwardScratch {
  float* u;        // [kTokensPerItem][kURowFloats] u = v*gamma of one slice
  float* acc;      // [kTokensPerItem][rows][L] one slice's lane sums of m for the pass's rows
  float* total;    // [kTokensPerItem][rows][L] the slices' lane sums, added in order
  float* sq_slice; // [kTokensPerItem][L] one slice's lane sums of v^2, then [kTokensPerItem] its scalar tails
  float* sum_sq;   // the same for the slices added in order
  float* phi_tail; // [rows][L] the last, partial, column vector of phi, zero-padded
  float* phi_panel; // [kTileRows][kPanelStride] one tile's rows of phi over a block of columns
  float* m;        // [kTokensPerItem][F]
  float* h_pre;    // [N]
};

// Decode's cast stores u while its tile loads phi: u is placed kUFromPhi bytes
// past phi's rows modulo a page, not on their low address bits, where each store
// holds up the loads that seem to follow it (4K aliasing: mhc-bench decode, T=1
// D=4096, against its floor).
constexpr uintptr_t kPage = 4096, kUFromPhi = kPage / 2;
constexpr int64_t kUSlackFloats = int64_t(kPage / sizeof(float));

int64_t ForwardScratchFloats(const PreShape& d) {
  const int64_t L = hn::Lanes(DF()), tokens = kTokensPerItem;
  const int64_t rows = std::min<int64_t>(d.F, kRowsPerPass);
  return tokens * kURowFloats + kUSlackFloats + 2 * tokens * rows * L + 2 * tokens * (L + 1) + rows * L +
         kTileRows * kPanelStride + tokens * d.F + d.N + 9 * 16;  // alignment slack
}

static ForwardScratch LayOutForwardScratch(float* base, const PreShape& d) {
  const int64_t L = hn::Lanes(DF()), tokens = kTokensPerItem;
  const int64_t rows = std::min<int64_t>(d.F, kRowsPerPass);
  ForwardScratch s;
  float* at = base;
  auto take = [&](int64_t floats) { float* p = at; at += align16(floats); return p; };
  s.u = take(tokens * kURowFloats + kUSlackFloats);  // u at its start; decode moves it (UAwayFromPhi)
  s.acc = take(tokens * rows * L);
  s.total = take(tokens * rows * L);
  s.sq_slice = take(tokens * (L + 1));
  s.sum_sq = take(tokens * (L + 1));
  s.phi_tail = take(rows * L);
  s.phi_panel = take(kTileRows * kPanelStride);
  s.m = take(tokens * d.F);
  s.h_pre = take(d.N);
  return s;
}

// sum[i] += part[i], i < count (a multiple of the lanes; both on vector boundaries).
static void AddInto(float* sum, const float* part, int64_t count) {
  const DF df;
  for (int64_t i = 0; i < count; i += hn::Lanes(df))
    hn::Store(hn::Add(hn::Load(df, sum + i), hn::Load(df, part + i)), df, sum + i);
}

// u[t][k - k0] = v * gamma for the columns [k0, k1) of token t (zeros up to k_end,
// the padded end); on the first pass also the sum of v^2, into sq_lanes and
// sq_tail. The same columns of token t_ahead are asked of the cache meanwhile: a
// slice of a row is at most a few pages, too short for the hardware prefetcher to
// learn. Rows of x and gamma are unit-stride (the driver stages other layouts);
// whole vectors go through ScaleRow in blocks of kSquareBlockColumns from each
// stream's piece of the slice, each block's squares from zero, the rest one
// element at a time.
static void CastChunk(const ForwardOperands& o, int64_t t, int64_t t_ahead, int64_t k0, int64_t k1,
                      int64_t k_end, float* u_row, float* sq_lanes, float* sq_tail, bool with_sum_sq) {
  const DF df;
  const int64_t D = o.shape.D;
  VF sq = hn::Load(df, sq_lanes);
  float tail = *sq_tail;
  const bool has_gamma = o.gamma.present();
  const int64_t esize = core::element_size(o.shape.x_dtype);
  const char* x = static_cast<const char*>(o.x.data);
  WithDType(o.shape.x_dtype, [&]<DType T>() {
    for (int64_t k = k0; k < k1;) {
      const int64_t n = k / D, j0 = k % D, j1 = std::min(D, j0 + (k1 - k));  // one stream's piece
      const int64_t x_at = o.x.at(t, n);
      const float* gamma = has_gamma ? o.gamma.row(n) : nullptr;
      const char* ahead = x + (t_ahead >= 0 ? o.x.at(t_ahead, n) : x_at) * esize;
      float* u_out = u_row + (n * D - k0);
      int64_t j = j0;
      while (j1 - j >= int64_t(hn::Lanes(df))) {
        VF block = hn::Zero(df);
        j += ScaleRow<T>(x + (x_at + j) * esize, has_gamma ? gamma + j : nullptr,
                         std::min<int64_t>(kSquareBlockColumns, j1 - j), u_out + j, block, with_sum_sq,
                         ahead + j * esize);
        sq = hn::Add(sq, block);
      }
      for (; j < j1; ++j) {
        const float v = core::load_element(x, T, x_at + j);
        if (with_sum_sq) tail += v * v;
        u_out[j] = has_gamma ? v * gamma[j] : v;
      }
      if (o.shape.hf32) RoundHf32Row(df, u_out + j0, j1 - j0);  // the product's operand
      k = n * D + j1;
    }
  });
  for (int64_t k = k1; k < k_end; ++k) u_row[k - k0] = 0.0f;
  hn::Store(sq, df, sq_lanes);
  *sq_tail = tail;
}

// Every tile of the item (tokens x rows) over `vectors` column vectors from u's
// column `column` (relative to the chunk) and phi's rows at w (w_stride apart).
static void RunTiles(const ForwardScratch& s, int64_t tokens, int64_t rows, int64_t column, const float* w,
                     int64_t w_stride, int64_t vectors, bool from_zero) {
  const int64_t L = hn::Lanes(DF());
  for (int64_t tt = 0; tt < tokens; tt += kTileTokens)
    for (int64_t fr = 0; fr < rows; fr += kTileRows)
      RunTile(int(std::min<int64_t>(kTileTokens, tokens - tt)), int(std::min<int64_t>(kTileRows, rows - fr)),
              s.u + tt * kURowFloats + column, w + fr * w_stride, w_stride, vectors, s.acc + (tt * rows + fr) * L,
              rows * L, from_zero);
}

// h_in = sum_n w[n] v[n], n ascending, for token t (w: h_pre, or the carried
// pre-mix): whole vectors through WeightedRows, the last partial vector gathered.
static void HInRow(const ForwardOperands& o, int64_t t, const float* own_h_pre) {
  const PreShape& d = o.shape;
  const DF df;
  const int64_t L = hn::Lanes(df), full = d.D / L * L;
  const int64_t x_row = o.x.at(t, 0), h_row = o.h_in.at(t, 0), xn = o.x.stream_stride;
  if (o.select_first_stream) {  // the first single-pass site: stream 0 as it is
    const size_t esize = core::element_size(d.x_dtype);
    std::memcpy(static_cast<char*>(o.h_in.data) + h_row * esize,
                static_cast<const char*>(o.x.data) + x_row * esize, size_t(d.D) * esize);
    return;
  }
  const float* h_pre = common::collapse_weights(o, t, own_h_pre);
  // h_in larger than the caches: streaming stores skip reading its lines first
  // (mhc-bench a forward: 32 MiB of h_in).
  const bool stream = o.streaming_stores && d.T * d.D * core::element_size(d.x_dtype) > kStreamHInBytes;
  WithDType(d.x_dtype, [&]<DType T>() {  // h_in has x's dtype
    const int64_t esize = core::element_size(T);
    WeightedRows<T>(static_cast<const char*>(o.x.data) + x_row * esize, xn, h_pre, d.N, full,
                    static_cast<char*>(o.h_in.data) + h_row * esize, stream);
    for (int64_t j = full; j < d.D; j += L) {
      const int64_t count = std::min(L, d.D - j);
      VF acc = hn::Zero(df);
      for (int64_t n = 0; n < d.N; ++n)
        acc = hn::MulAdd(hn::Set(df, h_pre[n]), LoadRow(df, o.x.data, T, x_row + n * xn + j, 1, count), acc);
      StoreRow(df, acc, o.h_in.data, T, h_row + j, 1, count);
    }
  });
}

// Tokens [t0, t1) whose m = phi.u another kernel formed (token t's m at
// m + (t - t0) * m_stride, the 16 lanes of its sum(v^2) at sq_lanes + (t - t0) * 16):
// the per-token outputs and h_in.
void ForwardFinishTokens(const ForwardOperands& o, int64_t t0, int64_t t1, const float* m, int64_t m_stride,
                         const float* sq_lanes, float* h_pre) {
  for (int64_t t = t0; t < t1; ++t) {
    float lanes[16];
    std::copy_n(sq_lanes + (t - t0) * 16, 16, lanes);
    common::forward_token_finish(o, t, common::fold16(lanes), m + (t - t0) * m_stride, h_pre);
    HInRow(o, t, h_pre);
  }
  hwy::FlushStream();  // HInRow's streaming stores, before the caller reads h_in
}

// SliceSums for one token whose streams are whole vectors (D % L == 0: no
// scalar tails, no partial vector of phi): the first row tile casts the slice
// as it runs (CastTile), in CastChunk's blocks, and the other tiles read the u
// it stored. Same bits as CastChunk then RunTiles.
static void CastSliceSums(const ForwardOperands& o, const ForwardScratch& s, int64_t t, int64_t f0, int64_t rows,
                          int64_t k0, int64_t k1, bool with_sq) {
  const PreShape& d = o.shape;
  const DF df;
  const int64_t L = hn::Lanes(df), D = d.D;
  const float* phi = o.phi.data + f0 * o.phi.row_stride;
  const int64_t phi_rs = o.phi.row_stride;
  const int first_rows = int(std::min<int64_t>(kTileRows, rows));
  const int64_t esize = core::element_size(d.x_dtype);
  const char* x = static_cast<const char*>(o.x.data);
  VF sq = hn::Zero(df);
  WithDType(d.x_dtype, [&]<DType T>() {
    for (int64_t k = k0; k < k1;) {
      const int64_t n = k / D, j0 = k % D, j1 = std::min(D, j0 + (k1 - k));  // one stream's piece
      const int64_t x_at = o.x.at(t, n);
      const float* gamma = o.gamma.present() ? o.gamma.row(n) : nullptr;
      for (int64_t j = j0; j < j1; j += kSquareBlockColumns) {
        const int64_t column = n * D + j, vectors = std::min<int64_t>(kSquareBlockColumns, j1 - j) / L;
        HWY_ALIGN float block[hn::MaxLanes(DF())] = {};
        const void* row = x + (x_at + j) * esize;
        CastTile<T>(1, first_rows, &row, gamma ? gamma + j : nullptr, d.hf32, s.u + (column - k0), phi + column,
                    phi_rs, vectors, s.acc, rows * L, column == k0, with_sq ? block : nullptr, nullptr);
        if (with_sq) sq = hn::Add(sq, hn::Load(df, block));
      }
      k = n * D + j1;
    }
  });
  if (with_sq) hn::Store(sq, df, s.sq_slice);
  for (int64_t fr = first_rows; fr < rows; fr += kTileRows)
    RunTile(1, int(std::min<int64_t>(kTileRows, rows - fr)), s.u, phi + fr * phi_rs + k0, phi_rs, (k1 - k0) / L,
            s.acc + fr * L, rows * L, true);
}

// The first row tile over the panel of columns [c0, c1) for every token tile, the
// tokens' cast fused in (CastTile) a block of kSquareBlockColumns at a time, each
// block's squares added to its token's slice lanes: the bits of CastChunk, then
// RunTiles. For D and k0 multiples of kSquareBlockColumns (a block lies in one stream).
static_assert(kPanelColumns % kSquareBlockColumns == 0, "a panel holds whole blocks of squares");
static void CastPanel(const ForwardOperands& o, const ForwardScratch& s, int64_t t0, int64_t tokens, int64_t rows,
                      int tile_rows, const float* panel, int64_t k0, int64_t c0, int64_t c1, bool first,
                      bool with_sq) {
  const PreShape& d = o.shape;
  const DF df;
  const int64_t L = hn::Lanes(df), esize = core::element_size(d.x_dtype);
  const char* x = static_cast<const char*>(o.x.data);
  WithDType(d.x_dtype, [&]<DType T>() {
    for (int64_t tt = 0; tt < tokens; tt += kCastTileTokens) {
      const int tile_tokens = int(std::min<int64_t>(kCastTileTokens, tokens - tt));
      for (int64_t b = c0; b < c1; b += kSquareBlockColumns) {
        const int64_t n = b / d.D, j = b % d.D, vectors = std::min(kSquareBlockColumns, c1 - b) / L;
        const void* x_rows[kCastTileTokens];
        const void* ahead_rows[kCastTileTokens];
        for (int q = 0; q < tile_tokens; ++q) {
          x_rows[q] = x + (o.x.at(t0 + tt + q, n) + j) * esize;
          const int64_t ahead = tt + q + kCastAhead < tokens ? tt + q + kCastAhead : tt + q;
          ahead_rows[q] = x + (o.x.at(t0 + ahead, n) + j) * esize;
        }
        HWY_ALIGN float squares[kCastTileTokens * hn::MaxLanes(DF())];
        CastTile<T>(tile_tokens, tile_rows, x_rows, o.gamma.present() ? o.gamma.row(n) + j : nullptr, d.hf32,
                    s.u + tt * kURowFloats + (b - k0), panel + (b - c0), kPanelStride, vectors,
                    s.acc + tt * rows * L, rows * L, first && b == c0, with_sq ? squares : nullptr, ahead_rows);
        for (int q = 0; q < tile_tokens && with_sq; ++q) {
          float* lanes = s.sq_slice + (tt + q) * L;
          hn::Store(hn::Add(hn::Load(df, lanes), hn::Load(df, squares + q * L)), df, lanes);
        }
      }
    }
  });
}

// One slice of K (pre_forward.hpp) for tokens [t0, t0 + tokens) and rows
// [f0, f0 + rows) of phi: s.acc the lane sums of m from zero, and with with_sq
// s.sq_slice the lanes and tails of sum(v^2) from zero.
static void SliceSums(const ForwardOperands& o, const ForwardScratch& s, int64_t t0, int64_t tokens, int64_t f0,
                      int64_t rows, int64_t slice, bool with_sq) {
  const PreShape& d = o.shape;
  const DF df;
  const int64_t L = hn::Lanes(df);
  const int64_t K_full = d.K / L * L, K_pad = round_up(d.K, L);
  const float* phi = o.phi.data;
  const int64_t phi_rs = o.phi.row_stride;
  const int64_t k0 = slice * kSliceColumns;
  const int64_t k_end = std::min(K_pad, k0 + kSliceColumns), k1 = std::min(d.K, k_end);
  if (with_sq) std::fill_n(s.sq_slice, tokens * (L + 1), 0.0f);
  if (tokens == 1 && d.D % L == 0) return CastSliceSums(o, s, t0, f0, rows, k0, k1, with_sq);
  const bool copy_phi = tokens > kTileTokens;
  // Items of many tokens cast in their first row tile (CastPanel), where the
  // slice's blocks of squares lie in one stream each: the cast's loads wait on x
  // behind that tile's multiply-adds instead of before them (mhc-bench a forward
  // and decode T=64, avx512).
  const bool cast_in_tiles = copy_phi && d.D % kSquareBlockColumns == 0 && k0 % kSquareBlockColumns == 0;
  for (int64_t t = 0; t < tokens && !cast_in_tiles; ++t)
    CastChunk(o, t0 + t, t + kCastAhead < tokens ? t0 + t + kCastAhead : -1, k0, k1, k_end, s.u + t * kURowFloats,
              s.sq_slice + t * L, s.sq_slice + tokens * L + t, with_sq);
  // The next slice's x is left to the hardware prefetchers and the cast's own
  // prefetch (asking for it from the tiles' inner loop costs more than it saves:
  // mhc-bench decode, T=16 and T=64).
  // Blocks of columns, each with panels of phi; each accumulator still takes its
  // column vectors in ascending order, so the bits are those of one pass over
  // the slice. An item of one tile's tokens reads phi once, in place, a tile's
  // rows over the whole slice at a time (not a block at a time: a quarter of the
  // tile calls and of the accumulators' loads and stores, and each row's stream
  // four times as long: mhc-bench decode, T=1).
  const int64_t full_end = std::min(k_end, K_full);  // columns read from phi (or its copy)
  // The sums' first run (the slice's, the first block's, else the tail's) starts
  // them from zero: no fill pass, which a one-token slice would pay in full
  // (mhc-bench decode, T=1).
  if (!copy_phi && full_end > k0)
    RunTiles(s, tokens, rows, 0, phi + f0 * phi_rs + k0, phi_rs, (full_end - k0) / L, true);
  for (int64_t c0 = k0; copy_phi && c0 < full_end; c0 += kPanelColumns) {
    const int64_t c1 = std::min(full_end, c0 + kPanelColumns), vectors = (c1 - c0) / L;
    const bool first = c0 == k0;
    for (int64_t fr = 0; fr < rows; fr += kTileRows) {
      const int tile_rows = int(std::min<int64_t>(kTileRows, rows - fr));
      // Weights prepared once bring their panels; else this call copies them (the
      // prepared panels: mhc-bench decode, prepared rows).
      const float* panel = o.phi_panels != nullptr ? o.phi_panels + PanelAt(d, f0, fr, c0) : s.phi_panel;
      if (o.phi_panels == nullptr) CopyPanel(phi + (f0 + fr) * phi_rs, phi_rs, tile_rows, c0, c1, s.phi_panel);
      if (cast_in_tiles && fr == 0) {
        CastPanel(o, s, t0, tokens, rows, tile_rows, panel, k0, c0, c1, first, with_sq);
        continue;
      }
      for (int64_t tt = 0; tt < tokens; tt += kTileTokens)
        RunTile(int(std::min<int64_t>(kTileTokens, tokens - tt)), tile_rows, s.u + tt * kURowFloats + (c0 - k0),
                panel, kPanelStride, vectors, s.acc + (tt * rows + fr) * L, rows * L, first);
    }
  }
  if (k_end > full_end && full_end >= k0) {  // the partial last column vector, zero-padded
    std::fill_n(s.phi_tail, rows * L, 0.0f);
    for (int64_t f = 0; f < rows; ++f)
      for (int64_t k = K_full; k < d.K; ++k) s.phi_tail[f * L + k - K_full] = phi[(f0 + f) * phi_rs + k];
    RunTiles(s, tokens, rows, full_end - k0, s.phi_tail, L, 1, full_end == k0);
  }
}

// u of one slice, within the scratch's u region, kUFromPhi bytes past phi's rows'
// addresses modulo a page (rounded to the vectors' alignment).
static float* UAwayFromPhi(float* u_region, const float* phi) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(u_region);
  const uintptr_t want = (reinterpret_cast<uintptr_t>(phi) + kUFromPhi) % kPage / 64 * 64;
  return reinterpret_cast<float*>(base + (want + kPage - base % kPage) % kPage);
}

// The decode path's prepared operands: per slice, [T][F][L] lane sums of m, then
// [T][L] lane sums of v^2 and [T] scalar tails (the layout of sq_slice), each
// slice's squares on a vector boundary.
struct DecodeSums {
  float* m;   // [slices][T][F][L]
  float* sq;  // [slices][sq_stride]
  int64_t sq_stride;
};
static DecodeSums DecodeSumsOf(void* prepared, const PreShape& d) {
  const int64_t L = hn::Lanes(DF());
  float* base = static_cast<float*>(prepared);
  return {base, base + slice_count(d.K) * d.T * d.F * L, align16(d.T * (L + 1))};
}

int64_t ForwardPreparedBytes(const PreShape& d) {
  if (d.T == 0 || d.T > kDecodeTokens) return 0;
  const int64_t L = hn::Lanes(DF());
  return slice_count(d.K) * (d.T * d.F * L + align16(d.T * (L + 1))) * int64_t(sizeof(float));
}

// Decode items are a few tokens: the finish reads each token's slices once.
int64_t ForwardItemTokens(const PreShape& d) { return d.T <= kDecodeTokens ? 8 : kTokensPerItem; }

// The slices of share `share` of `parts` (shares in slice order), and how many
// the first share that has any holds: the slices whose sums it leaves as running
// sums (ForwardPrepare).
static int64_t ShareBegin(int64_t slices, int64_t share, int64_t parts) { return slices * share / parts; }
static int64_t RunningSlices(int64_t slices, int64_t parts) {
  for (int64_t share = 1;; ++share)
    if (ShareBegin(slices, share, parts) > 0) return ShareBegin(slices, share, parts);
}

// total[i] = previous[i] + total[i] (previous nullptr: 0 + total[i]), the order in
// which the finish adds a slice to the sum before it; count a multiple of the lanes.
static void AddRunning(float* total, const float* previous, int64_t count) {
  const DF df;
  for (int64_t i = 0; i < count; i += hn::Lanes(df))
    hn::Store(hn::Add(previous ? hn::Load(df, previous + i) : hn::Zero(df), hn::Load(df, total + i)), df, total + i);
}

// The decode path's share `part` of `parts` of the slices, every token's. Part 0
// takes the last slices (the driver runs it on the thread that then finishes, which
// so reads them from its own cache); the share with the first slices leaves
// running sums (each slice's entry the sum of the slices up to it, added as the
// finish adds them), so the finish reads one entry of that share instead of each
// (mhc-bench decode).
bool ForwardPrepare(const ForwardOperands& o, void* prepared, int64_t part, int64_t parts, float* scratch) {
  const PreShape& d = o.shape;
  const int64_t L = hn::Lanes(DF()), slices = slice_count(d.K);
  ForwardScratch s = LayOutForwardScratch(scratch, d);
  s.u = UAwayFromPhi(s.u, o.phi.data);
  const DecodeSums sums = DecodeSumsOf(prepared, d);
  const int64_t share = parts - 1 - part, begin = ShareBegin(slices, share, parts);
  const int64_t end = ShareBegin(slices, share + 1, parts);
  for (int64_t slice = begin; slice < end; ++slice) {
    float* m = sums.m + slice * d.T * d.F * L;
    if (d.F <= kRowsPerPass) {  // one pass: the slice's sums laid out as the scratch's, formed in place
      ForwardScratch in_place = s;
      in_place.acc = m;
      in_place.sq_slice = sums.sq + slice * sums.sq_stride;
      SliceSums(o, in_place, 0, d.T, 0, d.F, slice, true);
      continue;
    }
    for (int64_t f0 = 0; f0 < d.F; f0 += kRowsPerPass) {
      const int64_t rows = std::min<int64_t>(kRowsPerPass, d.F - f0);
      SliceSums(o, s, 0, d.T, f0, rows, slice, f0 == 0);
      for (int64_t t = 0; t < d.T; ++t)
        std::copy_n(s.acc + t * rows * L, rows * L, m + (t * d.F + f0) * L);
      if (f0 == 0) std::copy_n(s.sq_slice, d.T * (L + 1), sums.sq + slice * sums.sq_stride);
    }
  }
  if (begin == 0)
    for (int64_t slice = 0; slice < end; ++slice) {
      const int64_t m_floats = d.T * d.F * L;
      float* sq = sums.sq + slice * sums.sq_stride;
      const float* sq_before = slice > 0 ? sq - sums.sq_stride : nullptr;
      AddRunning(sums.m + slice * m_floats, slice > 0 ? sums.m + (slice - 1) * m_floats : nullptr, m_floats);
      AddRunning(sq, sq_before, d.T * L);
      for (int64_t t = 0; t < d.T; ++t) sq[d.T * L + t] = (sq_before ? sq_before[d.T * L + t] : 0.0f) + sq[d.T * L + t];
    }
  return true;
}

// Tokens [t0, t1) of a decode call: each token's slices added in order, as
// ForwardTokens adds them, then the finish.
static void DecodeTokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  const ForwardOperands& o = *item.operands;
  const PreShape& d = o.shape;
  const DF df;
  const int64_t L = hn::Lanes(df), slices = slice_count(d.K);
  const ForwardScratch s = LayOutForwardScratch(item.scratch, d);
  const DecodeSums sums = DecodeSumsOf(item.prepared->data, d);
  constexpr int64_t kRowBlock = 8;  // rows of m whose lanes are summed side by side, in registers
  const int64_t first = RunningSlices(slices, item.prepared->parts);  // slices [0, first) in one running sum
  for (int64_t t = t0; t < t1; ++t) {
    // Each row's slices are added in slice order onto the first share's running
    // sum, a block of rows over every slice at a time: each slice's lines are read
    // in one run, not one line per slice and row.
    for (int64_t f0 = 0; f0 < d.F; f0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, d.F - f0);
      VecArray<kRowBlock> lanes;
      const float* running = sums.m + (((first - 1) * d.T + t) * d.F + f0) * L;
      for (int64_t j = 0; j < rows; ++j) lanes[j] = hn::Load(df, running + j * L);
      for (int64_t slice = first; slice < slices; ++slice) {
        const float* row = sums.m + ((slice * d.T + t) * d.F + f0) * L;
        for (int64_t j = 0; j < rows; ++j) lanes[j] = hn::Add(lanes[j], hn::Load(df, row + j * L));
      }
      for (int64_t j = 0; j < rows; ++j) s.m[f0 + j] = FoldLanes(df, lanes[j]);
    }
    const float* sq_running = sums.sq + (first - 1) * sums.sq_stride;
    VF sq = hn::Load(df, sq_running + t * L);
    float tail = sq_running[d.T * L + t];
    for (int64_t slice = first; slice < slices; ++slice) {
      const float* sq_slice = sums.sq + slice * sums.sq_stride;
      sq = hn::Add(sq, hn::Load(df, sq_slice + t * L));
      tail += sq_slice[d.T * L + t];
    }
    common::forward_token_finish(o, t, FoldLanes(df, sq) + tail, s.m, s.h_pre);
    HInRow(o, t, s.h_pre);
  }
  hwy::FlushStream();  // HInRow's streaming stores, before the caller reads h_in
}

void ForwardTokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  const ForwardOperands& o = *item.operands;
  const PreShape& d = o.shape;
  if (d.T <= kDecodeTokens) return DecodeTokens(item, t0, t1);
  const DF df;
  const int64_t L = hn::Lanes(df), tokens = t1 - t0, slices = slice_count(d.K);
  const ForwardScratch s = LayOutForwardScratch(item.scratch, d);
  std::fill_n(s.sum_sq, tokens * (L + 1), 0.0f);
  for (int64_t f0 = 0; f0 < d.F; f0 += kRowsPerPass) {  // passes over rows of phi
    const int64_t rows = std::min<int64_t>(kRowsPerPass, d.F - f0);
    std::fill_n(s.total, tokens * rows * L, 0.0f);
    for (int64_t slice = 0; slice < slices; ++slice) {
      SliceSums(o, s, t0, tokens, f0, rows, slice, f0 == 0);
      AddInto(s.total, s.acc, tokens * rows * L);
      if (f0 > 0) continue;
      AddInto(s.sum_sq, s.sq_slice, tokens * L);
      for (int64_t t = 0; t < tokens; ++t) s.sum_sq[tokens * L + t] += s.sq_slice[tokens * L + t];
    }
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t f = 0; f < rows; ++f)
        s.m[t * d.F + f0 + f] = FoldLanes(df, hn::Load(df, s.total + (t * rows + f) * L));
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const float sum_sq = FoldLanes(df, hn::Load(df, s.sum_sq + t * L)) + s.sum_sq[tokens * L + t];
    common::forward_token_finish(o, t0 + t, sum_sq, s.m + t * d.F, s.h_pre);
    HInRow(o, t0 + t, s.h_pre);
  }
  hwy::FlushStream();  // HInRow's streaming stores, before the caller reads h_in
}

// fp32 lanes of a vector (SVE: read from the CPU; call only where it runs the target).
int64_t FloatLanes() { return int64_t(hn::Lanes(DF())); }

// (Unused on the targets the registry does not name.)
[[maybe_unused]] const PreForwardKernels kPreForward = {.scratch_floats = ForwardScratchFloats,
                                                        .tokens = ForwardTokens,
                                                        .item_tokens = ForwardItemTokens,
                                                        .prepared_bytes = ForwardPreparedBytes,
                                                        .prepare = ForwardPrepare,
                                                        .phi_panels_bytes = PhiPanelsBytes,
                                                        .lay_out_phi_panels = LayOutPhiPanels,
                                                        .finish_tokens = ForwardFinishTokens};

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/per_target.hpp"
#if HWY_ARCH_X86
#include <cpuid.h>
#endif

namespace mhc::kernels::simd {
const PreForwardKernels* pre_forward(Isa isa) { return MHC_SIMD_PER_TARGET(const PreForwardKernels*, isa, kPreForward); }
bool runs(Isa isa) {
  int64_t target = 0;
  switch (isa) {
    case Isa::avx512: target = HWY_AVX3; break;
    case Isa::avx2: target = HWY_AVX2; break;
    case Isa::sve2: target = HWY_SVE2; break;
    case Isa::sve: target = HWY_SVE; break;
    case Isa::neon: target = HWY_NEON; break;
    default: return false;
  }
  // Highway runs CPUID again on every call: under KVM each is a VM exit, a large part
  // of a one-token call (mhc-bench decode, T=1), so the answer is kept (the CPU does not
  // change under a process).
  static const int64_t supported = hwy::SupportedTargets();
  if ((supported & HWY_TARGETS & target) == 0) return false;
  // SVE's vectors are 128 to 2048 bits; the kernels are tested (and their folds and
  // tables written) for 128, 256 and 512.
#if HWY_TARGETS & HWY_SVE2
  if (isa == Isa::sve2) return N_SVE2::FloatLanes() <= 16;
#endif
#if HWY_TARGETS & HWY_SVE
  if (isa == Isa::sve) return N_SVE::FloatLanes() <= 16;
#endif
  return true;
}

bool has_avx512_bf16() {
#if HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX3)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return runs(Isa::avx512) && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
  }();
  return has;
#else
  return false;
#endif
}
}  // namespace mhc::kernels::simd
#endif
