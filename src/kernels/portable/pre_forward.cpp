// Portable MhcPre: plain C++ in fp32 (SPEC §2), any architecture.
//
// A token's long sums go slice by slice (pre_forward.hpp): per slice of K, 16
// lanes from zero (the squares in blocks of kSquareBlockColumns), the slices'
// lanes added in order, then folded. Calls of at most kDecodeTokens tokens share
// the slices among the preparation's parts and add them per token in the same
// order, so a token's bits do not depend on its call.
#include <algorithm>
#include <cstring>
#include <cmath>

#include "kernels/common/hf32.hpp"
#include "kernels/common/token_math.hpp"
#include "kernels/tables.hpp"
#include "kernels/portable/blocked_sum.hpp"

namespace mhc::kernels::portable {

namespace {

// The lane sums of one slice of one token: F rows of m, then the squares.
int64_t slice_floats(const PreShape& d) { return (d.F + 1) * kLanes; }

int64_t forward_scratch_floats(const PreShape& d) {  // v, u = v*gamma, m, h_pre, one slice's lanes, their totals
  return 2 * align16(d.K) + align16(d.F) + align16(d.N) + 2 * align16(slice_floats(d));
}

struct Scratch {
  float *v, *u, *m, *h_pre, *lanes, *totals;
};
Scratch lay_out(float* base, const PreShape& d) {
  Scratch s;
  s.v = base;                      // [K] token as fp32
  s.u = s.v + align16(d.K);        // [K] v * gamma
  s.m = s.u + align16(d.K);        // [F] h_mix
  s.h_pre = s.m + align16(d.F);    // [N]
  s.lanes = s.h_pre + align16(d.N);  // [F + 1][16]
  s.totals = s.lanes + align16(slice_floats(d));  // [F + 1][16]
  return s;
}

// v of token t over columns [k0, k1), as fp32.
void load_v(const ForwardOperands& o, int64_t t, int64_t k0, int64_t k1, const Scratch& s) {
  const PreShape& d = o.shape;
  for (int64_t k = k0; k < k1; ++k)
    s.v[k] = core::load_element(o.x.data, d.x_dtype, o.x.at(t, k / d.D) + k % d.D);
}

// v and u of token t over columns [k0, k1); returns the operand of the products.
const float* load_token(const ForwardOperands& o, int64_t t, int64_t k0, int64_t k1, const Scratch& s) {
  const PreShape& d = o.shape;
  load_v(o, t, k0, k1, s);
  if (!o.gamma.present() && !d.hf32) return s.v;
  for (int64_t k = k0; k < k1; ++k) s.u[k] = o.gamma.present() ? s.v[k] * o.gamma.row(k / d.D)[k % d.D] : s.v[k];
  if (d.hf32) common::round_hf32(s.u + k0, k1 - k0);  // the product's operand
  return s.u;
}

// One slice's lanes of token t (loaded over the slice): [F][16] of m, [16] of v^2.
void slice_lanes(const ForwardOperands& o, const float* operand, int64_t slice, const Scratch& s, float* out) {
  const PreShape& d = o.shape;
  const int64_t k0 = slice * kSliceColumns, k1 = std::min(d.K, k0 + kSliceColumns);
  std::fill_n(out, slice_floats(d), 0.0f);
  for (int64_t f = 0; f < d.F; ++f)
    add_blocks(operand, o.phi.row(f), k0, k1, kSliceColumns, *reinterpret_cast<float(*)[kLanes]>(out + f * kLanes));
  add_blocks(s.v, s.v, k0, k1, kSquareBlockColumns, *reinterpret_cast<float(*)[kLanes]>(out + d.F * kLanes));
}

// m and the sum of squares from the slices' lanes added in order, then the outputs and h_in.
void finish_token(const ForwardOperands& o, int64_t t, const Scratch& s, const float* totals) {
  const PreShape& d = o.shape;
  float lanes[kLanes];
  for (int64_t f = 0; f < d.F; ++f) {
    std::copy_n(totals + f * kLanes, kLanes, lanes);
    s.m[f] = fold_lanes(lanes);
  }
  std::copy_n(totals + d.F * kLanes, kLanes, lanes);
  common::forward_token_finish(o, t, fold_lanes(lanes), s.m, s.h_pre);
  if (o.select_first_stream) {  // the first single-pass site: stream 0 as it is
    const size_t esize = core::element_size(d.x_dtype);
    std::memcpy(static_cast<char*>(o.h_in.data) + o.h_in.at(t, 0) * esize,
                static_cast<const char*>(o.x.data) + o.x.at(t, 0) * esize, size_t(d.D) * esize);
    return;
  }
  const float* w = common::collapse_weights(o, t, s.h_pre);
  for (int64_t j = 0; j < d.D; ++j) {
    float acc = 0.0f;  // n ascending, in fp32 (SPEC §2)
    for (int64_t n = 0; n < d.N; ++n) acc += w[n] * s.v[n * d.D + j];
    core::store_element(o.h_in.data, d.x_dtype, o.h_in.at(t, 0) + j, acc);
  }
}

int64_t forward_prepared_bytes(const PreShape& d) {
  if (d.T == 0 || d.T > kDecodeTokens) return 0;
  return slice_count(d.K) * d.T * slice_floats(d) * int64_t(sizeof(float));
}

int64_t forward_item_tokens(const PreShape& d) { return d.T <= kDecodeTokens ? 8 : kTokensPerItem; }

// A decode call's share `part` of `parts` of the slices, every token's lanes.
bool forward_prepare(const ForwardOperands& o, void* prepared, int64_t part, int64_t parts, float* scratch) {
  const PreShape& d = o.shape;
  const Scratch s = lay_out(scratch, d);
  const int64_t slices = slice_count(d.K);
  float* all = static_cast<float*>(prepared);
  for (int64_t slice = slices * part / parts; slice < slices * (part + 1) / parts; ++slice)
    for (int64_t t = 0; t < d.T; ++t) {
      const int64_t k0 = slice * kSliceColumns;
      const float* operand = load_token(o, t, k0, std::min(d.K, k0 + kSliceColumns), s);
      slice_lanes(o, operand, slice, s, all + (slice * d.T + t) * slice_floats(d));
    }
  return true;
}

void forward_tokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  const ForwardOperands& o = *item.operands;
  const PreShape& d = o.shape;
  const Scratch s = lay_out(item.scratch, d);
  const int64_t slices = slice_count(d.K), per_slice = slice_floats(d);
  float* totals = s.totals;
  for (int64_t t = t0; t < t1; ++t) {
    std::fill_n(totals, per_slice, 0.0f);
    if (d.T <= kDecodeTokens) {  // the preparation's slices
      load_v(o, t, 0, d.K, s);  // finish_token's h_in
      const float* all = static_cast<const float*>(item.prepared->data);
      for (int64_t slice = 0; slice < slices; ++slice)
        for (int64_t i = 0; i < per_slice; ++i) totals[i] += all[(slice * d.T + t) * per_slice + i];
    } else {
      const float* operand = load_token(o, t, 0, d.K, s);
      for (int64_t slice = 0; slice < slices; ++slice) {
        slice_lanes(o, operand, slice, s, s.lanes);
        for (int64_t i = 0; i < per_slice; ++i) totals[i] += s.lanes[i];
      }
    }
    finish_token(o, t, s, totals);
  }
}

}  // namespace

const PreForwardKernels kPreForward = {.scratch_floats = forward_scratch_floats,
                                       .tokens = forward_tokens,
                                       .item_tokens = forward_item_tokens,
                                       .prepared_bytes = forward_prepared_bytes,
                                       .prepare = forward_prepare};

}  // namespace mhc::kernels::portable
