// The MhcPost tables (kernels/post.hpp, SPEC §11) of every registry entry this
// build has and this CPU runs, and of every SIMD target directly, against the
// fp32 steps' table (kernels/fp32_steps/post.cpp), bitwise: out, grad_x (x's dtype
// and fp32), grad_h_res (given or not), grad_h_out, grad_h_post. N 1..8 and 13, D
// with vector tails (1, 15, 17, 64, 300), bf16/fp16/fp32, h_res present and absent,
// streams and tokens farther apart than D and N*D, the forward's columns split at
// multiples of 64 and its tokens at any count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.hpp"
#include "kernels/post.hpp"
#include "kernels/registry.hpp"
#include "kernels/tables.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

using mhc::kernels::PostBackwardOperands;
using mhc::kernels::PostForwardOperands;
using mhc::kernels::PostKernels;
using mhc::kernels::PostShape;

struct Table {
  std::string name;
  const PostKernels* k;
};

std::vector<Table> tables() {
  std::vector<Table> out;
  for (const mhc::kernels::Implementation& impl : mhc::kernels::implementations())
    if (impl.available() && impl.post != nullptr) out.push_back({std::string("entry ") + impl.name, impl.post});
#if defined(MHC_WITH_SIMD)
  for (mhc::Isa isa : kSimdFamilies)
    if (mhc::kernels::simd::runs(isa) && mhc::kernels::simd::post(isa) != nullptr) {
      out.push_back({std::string("simd ") + mhc::isa_name(isa), mhc::kernels::simd::post(isa, false)});
      if (isa == mhc::Isa::avx512 && mhc::kernels::simd::has_avx512_bf16())
        out.push_back({"simd avx512 vcvtne2ps2bf16", mhc::kernels::simd::post(isa, true)});
    }
#endif
  return out;
}

const PostKernels& reference_table() { return mhc::kernels::fp32_steps::kPost; }

// A buffer of elements of one dtype, raw bytes (16-bit or 32-bit units).
struct Raw {
  DType dtype = DType::fp32;
  std::vector<uint8_t> bytes;
  Raw() = default;
  Raw(DType t, int64_t n, uint8_t fill) : dtype(t), bytes(size_t(n * mhc::core::element_size(t)), fill) {}
  void set(int64_t i, float v) { mhc::core::store_element(bytes.data(), dtype, i, v); }
  float get(int64_t i) const { return mhc::core::load_element(bytes.data(), dtype, i); }
  void* data() { return bytes.data(); }
  // Element i's bits as they are (a NaN's payload kept): a uint16_t or a uint32_t.
  template <class Bits>
  void set_bits(int64_t i, Bits b) {
    std::memcpy(bytes.data() + i * mhc::core::element_size(dtype), &b, sizeof b);
  }
};

::testing::AssertionResult same_bytes(const Raw& got, const Raw& want, const char* what) {
  const int64_t es = mhc::core::element_size(want.dtype);
  for (size_t b = 0; b < want.bytes.size(); ++b)
    if (got.bytes[b] != want.bytes[b]) {
      const int64_t e = int64_t(b) / es;
      return ::testing::AssertionFailure()
             << what << " differs at element " << e << ": " << mhc::core::load_element(got.bytes.data(), got.dtype, e)
             << " vs reference " << mhc::core::load_element(want.bytes.data(), want.dtype, e);
    }
  return ::testing::AssertionSuccess();
}

constexpr uint8_t kFill = 0xa5;

// Operands of one case: per-token tensors with padded strides (elements).
struct Case {
  PostShape s;
  int64_t stream_stride = 0, token_stride = 0, vec_stride = 0, mat_stride = 0;
  Raw x, h_out, grad_out;  // x's dtype; h_out [T][1][D] at token_stride
  std::vector<float> h_res, h_post;
};

Case make_case(int64_t T, int64_t N, int64_t D, DType dtype, bool has_h_res, DType grad_x_dtype, uint64_t seed) {
  Case c;
  c.s = {.T = T, .N = N, .D = D, .x_dtype = dtype, .grad_x_dtype = grad_x_dtype, .has_h_res = has_h_res};
  c.stream_stride = D + (seed % 3);
  c.token_stride = N * c.stream_stride + 5;
  c.vec_stride = N + 1;
  c.mat_stride = N * N + 2;
  Rng rng(seed);
  c.x = Raw(dtype, T * c.token_stride, 0x7f);  // the padding is a NaN pattern: never read
  c.grad_out = Raw(dtype, T * c.token_stride, 0x7f);
  c.h_out = Raw(dtype, T * c.token_stride, 0x7f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        c.x.set(t * c.token_stride + n * c.stream_stride + d, float(rng.normal() * 2));
        c.grad_out.set(t * c.token_stride + n * c.stream_stride + d, float(rng.normal()));
      }
    for (int64_t d = 0; d < D; ++d) c.h_out.set(t * c.token_stride + d, float(rng.normal() * 3));
  }
  c.h_res.assign(size_t(T * c.mat_stride), NAN);
  c.h_post.assign(size_t(T * c.vec_stride), NAN);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < N * N; ++e) c.h_res[size_t(t * c.mat_stride + e)] = float(rng.uniform(-0.3, 1.1));
    for (int64_t n = 0; n < N; ++n) c.h_post[size_t(t * c.vec_stride + n)] = float(rng.uniform(0, 2));
  }
  return c;
}

Raw forward(const PostKernels& k, Case& c, int64_t token_piece, int64_t column_piece) {
  Raw out(c.s.x_dtype, c.s.T * c.token_stride, kFill);
  PostForwardOperands o;
  o.shape = c.s;
  o.x = {c.x.data(), c.token_stride, c.stream_stride};
  if (c.s.has_h_res) o.h_res = {c.h_res.data(), c.mat_stride};
  o.h_out = {c.h_out.data(), c.token_stride, 0};
  o.h_post = {c.h_post.data(), c.vec_stride};
  o.out = {out.data(), c.token_stride, c.stream_stride};
  AlignedFloats scratch(size_t(k.forward_scratch_floats(c.s)) + 16);
  for (int64_t t0 = 0; t0 < c.s.T; t0 += token_piece)
    for (int64_t d0 = 0; d0 < c.s.D; d0 += column_piece)
      k.forward(o, scratch.data(), t0, std::min(c.s.T, t0 + token_piece), d0, std::min(c.s.D, d0 + column_piece));
  return out;
}

struct Grads {
  Raw grad_x, grad_h_out;
  std::vector<float> grad_h_res, grad_h_post;
};

Grads backward(const PostKernels& k, Case& c, bool want_grad_h_res, int64_t token_piece, int64_t scratch_offset) {
  Grads g;
  g.grad_x = Raw(c.s.grad_x_dtype, c.s.T * c.token_stride, kFill);
  g.grad_h_out = Raw(c.s.x_dtype, c.s.T * c.token_stride, kFill);
  g.grad_h_res.assign(size_t(c.s.T * c.mat_stride), -5.0f);
  g.grad_h_post.assign(size_t(c.s.T * c.vec_stride), -5.0f);
  PostBackwardOperands o;
  o.shape = c.s;
  o.grad_out = {c.grad_out.data(), c.token_stride, c.stream_stride};
  o.x = {c.x.data(), c.token_stride, c.stream_stride};
  if (c.s.has_h_res) o.h_res = {c.h_res.data(), c.mat_stride};
  o.h_out = {c.h_out.data(), c.token_stride, 0};
  o.h_post = {c.h_post.data(), c.vec_stride};
  o.grad_x = {g.grad_x.data(), c.token_stride, c.stream_stride};
  if (want_grad_h_res) o.grad_h_res = {g.grad_h_res.data(), c.mat_stride};
  o.grad_h_out = {g.grad_h_out.data(), c.token_stride, 0};
  o.grad_h_post = {g.grad_h_post.data(), c.vec_stride};
  AlignedFloats scratch(size_t(k.backward_scratch_floats(c.s) + scratch_offset) + 16);
  for (int64_t t0 = 0; t0 < c.s.T; t0 += token_piece)
    k.backward(o, scratch.data() + scratch_offset, t0, std::min(c.s.T, t0 + token_piece));
  return g;
}

::testing::AssertionResult same_floats(const std::vector<float>& got, const std::vector<float>& want,
                                       const char* what) {
  for (size_t i = 0; i < want.size(); ++i)
    if (bits(got[i]) != bits(want[i]))
      return ::testing::AssertionFailure() << what << " differs at float " << i << ": " << got[i] << " vs reference "
                                           << want[i];
  return ::testing::AssertionSuccess();
}

// Every output of the backward, the reference's bits: grad_x, grad_h_out, grad_h_res, grad_h_post.
::testing::AssertionResult same_grads(const Grads& got, const Grads& want) {
  for (auto result : {same_bytes(got.grad_x, want.grad_x, "grad_x"),
                      same_bytes(got.grad_h_out, want.grad_h_out, "grad_h_out"),
                      same_floats(got.grad_h_res, want.grad_h_res, "grad_h_res"),
                      same_floats(got.grad_h_post, want.grad_h_post, "grad_h_post")})
    if (!result) return result;
  return ::testing::AssertionSuccess();
}

const int64_t kNs[] = {1, 2, 3, 4, 5, 6, 7, 8, 13};
const int64_t kDs[] = {1, 15, 17, 64, 300};

TEST(PostTables, EveryTableHasBothKernels) {
  for (const Table& t : tables()) {
    SCOPED_TRACE(t.name);
    EXPECT_NE(t.k->forward, nullptr);
    EXPECT_NE(t.k->backward, nullptr);
    EXPECT_NE(t.k->forward_scratch_floats, nullptr);
    EXPECT_NE(t.k->backward_scratch_floats, nullptr);
  }
  EXPECT_GE(tables().size(), size_t(2));
}

TEST(PostTables, ForwardBitwiseEqualsTheReference) {
  const std::vector<Table> all = tables();
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (int64_t N : kNs)
      for (int64_t D : kDs)
        for (bool has_h_res : {true, false}) {
          const int64_t T = 5;
          Case c = make_case(T, N, D, dtype, has_h_res, dtype, uint64_t(N * 977 + D * 3 + int(dtype) * 7 + has_h_res));
          const Raw want = forward(reference_table(), c, T, D);
          // The padding between streams and tokens is never written.
          for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n)
              for (int64_t d = D; d < c.stream_stride; ++d)
                ASSERT_EQ(want.bytes[size_t((t * c.token_stride + n * c.stream_stride + d) *
                                            mhc::core::element_size(dtype))], kFill);
          for (const Table& t : all)
            for (auto [token_piece, column_piece] : {std::pair<int64_t, int64_t>{T, D}, {2, 64}, {1, 128}}) {
              SCOPED_TRACE(t.name + " " + mhc::core::dtype_name(dtype) + " N " + std::to_string(N) + " D " +
                           std::to_string(D) + (has_h_res ? " h_res" : " identity") + " pieces " +
                           std::to_string(token_piece) + "x" + std::to_string(column_piece));
              ASSERT_TRUE(same_bytes(forward(*t.k, c, token_piece, column_piece), want, "out"));
            }
        }
}

TEST(PostTables, BackwardBitwiseEqualsTheReference) {
  const std::vector<Table> all = tables();
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (int64_t N : kNs)
      for (int64_t D : kDs)
        for (bool has_h_res : {true, false})
          for (DType grad_x_dtype : {dtype, DType::fp32}) {
            if (dtype == DType::fp32 && grad_x_dtype == DType::fp32 && !has_h_res) continue;  // seen already
            const int64_t T = 5;
            Case c = make_case(T, N, D, dtype, has_h_res, grad_x_dtype,
                               uint64_t(N * 31 + D * 17 + int(dtype) * 5 + has_h_res + 2 * int(grad_x_dtype)));
            const Grads want = backward(reference_table(), c, true, T, 0);
            const Grads want_no_res = backward(reference_table(), c, false, T, 0);
            for (int64_t t = 0; t < T; ++t)
              for (int64_t e = 0; e < c.mat_stride; ++e)
                ASSERT_EQ(want_no_res.grad_h_res[size_t(t * c.mat_stride + e)], -5.0f) << "grad_h_res not asked for";
            for (const Table& t : all)
              for (int64_t piece : {T, int64_t(2)}) {
                SCOPED_TRACE(t.name + " " + mhc::core::dtype_name(dtype) + " N " + std::to_string(N) + " D " +
                             std::to_string(D) + (has_h_res ? " h_res" : " identity") + " grad_x " +
                             mhc::core::dtype_name(grad_x_dtype) + " piece " + std::to_string(piece));
                const Grads got = backward(*t.k, c, true, piece, piece == 2 ? 1 : 0);
                ASSERT_TRUE(same_grads(got, want));
                const Grads plain = backward(*t.k, c, false, piece, 0);
                ASSERT_TRUE(same_floats(plain.grad_h_res, want_no_res.grad_h_res, "grad_h_res absent"));
                ASSERT_TRUE(same_bytes(plain.grad_x, want.grad_x, "grad_x (no grad_h_res)"));
                ASSERT_TRUE(same_floats(plain.grad_h_post, want.grad_h_post, "grad_h_post (no grad_h_res)"));
              }
          }
}

// A block of the backward's pair sums is 256 columns: D across several blocks.
TEST(PostTables, BackwardAcrossSeveralColumnBlocks) {
  const std::vector<Table> all = tables();
  for (int64_t D : {255, 256, 257, 700})
    for (DType dtype : {DType::bf16, DType::fp32}) {
      Case c = make_case(3, 4, D, dtype, true, DType::fp32, uint64_t(D));
      const Grads want = backward(reference_table(), c, true, 3, 0);
      for (const Table& t : all) {
        SCOPED_TRACE(t.name + " D " + std::to_string(D));
        const Grads got = backward(*t.k, c, true, 3, 0);
        ASSERT_TRUE(same_floats(got.grad_h_res, want.grad_h_res, "grad_h_res"));
        ASSERT_TRUE(same_floats(got.grad_h_post, want.grad_h_post, "grad_h_post"));
        ASSERT_TRUE(same_bytes(got.grad_x, want.grad_x, "grad_x"));
      }
    }
}

// Signed zeros: -0 inputs and products whose sums are -0 or +0 by the order and the
// first term; every table the reference's bits (the sign of a zero included).
TEST(PostTables, SignedZerosGiveTheReferenceBits) {
  const std::vector<Table> all = tables();
  for (DType dtype : {DType::bf16, DType::fp32})
    for (int64_t N : {1, 4, 5})
      for (bool has_h_res : {true, false}) {
        Case c = make_case(4, N, 33, dtype, has_h_res, DType::fp32, uint64_t(N + 5));
        for (int64_t t = 0; t < 4; ++t) {
          for (int64_t n = 0; n < N; ++n)
            for (int64_t d = 0; d < 33; ++d) {
              c.x.set(t * c.token_stride + n * c.stream_stride + d, (t + n + d) % 2 ? -0.0f : 0.0f);
              c.grad_out.set(t * c.token_stride + n * c.stream_stride + d, t % 2 ? -0.0f : float(d % 3) - 1.0f);
            }
          for (int64_t d = 0; d < 33; ++d) c.h_out.set(t * c.token_stride + d, t == 3 ? 1.0f : -0.0f);
          for (int64_t e = 0; e < N * N; ++e) c.h_res[size_t(t * c.mat_stride + e)] = e % 2 ? -0.0f : 0.5f;
        }
        const Raw want_out = forward(reference_table(), c, 4, 33);
        const Grads want = backward(reference_table(), c, true, 4, 0);
        for (const Table& t : all) {
          SCOPED_TRACE(t.name + " " + mhc::core::dtype_name(dtype) + " N " + std::to_string(N));
          ASSERT_TRUE(same_bytes(forward(*t.k, c, 4, 33), want_out, "out"));
          const Grads got = backward(*t.k, c, true, 4, 0);
          ASSERT_TRUE(same_grads(got, want));
        }
      }
}

// NaNs and infinities: NaN payloads whose low bits would carry into a bf16 if
// rounded as numbers (from h_res and h_post, fp32), NaN inputs, and inf - inf in
// grad_x's sums; every table gives the reference's bits, token by token.
TEST(PostTables, NaNsAndInfinitiesGiveTheReferenceBits) {
  const std::vector<Table> all = tables();
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (int64_t D : {64, 300})
      for (DType grad_x_dtype : {dtype, DType::fp32}) {
        const int64_t T = 6, N = 4;
        Case c = make_case(T, N, D, dtype, true, grad_x_dtype, uint64_t(D + int(dtype)));
        auto at = [&](int64_t t, int64_t n, int64_t d) { return t * c.token_stride + n * c.stream_stride + d; };
        c.h_res[size_t(1 * c.mat_stride + 1)] = from_bits(0x7fc09234u);  // token 1: grad_x row 0
        c.h_post[size_t(2 * c.vec_stride + 2)] = from_bits(0xffc18001u);  // token 2: grad_h_out
        for (int64_t d = 5; d < D; d += 37) {
          c.grad_out.set(at(3, 0, d), INFINITY);  // token 3: inf - inf in grad_x and grad_h_out
          c.grad_out.set(at(3, 1, d), -INFINITY);
        }
        if (dtype == DType::fp32) {
          const uint32_t nan = 0x7fa0c001u;  // signalling, made quiet by the first product
          c.grad_out.set_bits(at(4, 2, D / 2), nan);
          c.x.set_bits(at(5, 3, 7), nan);
        } else {
          const uint16_t nan = dtype == DType::bf16 ? 0x7fa1 : 0x7d01;  // signalling, with a payload
          c.grad_out.set_bits(at(4, 2, D / 2), nan);
          c.x.set_bits(at(5, 3, 7), nan);
        }
        const Grads want = backward(reference_table(), c, true, T, 0);
        for (const Table& t : all)
          for (int64_t piece : {T, int64_t(2)}) {
            SCOPED_TRACE(t.name + " " + mhc::core::dtype_name(dtype) + " D " + std::to_string(D) + " grad_x " +
                         mhc::core::dtype_name(grad_x_dtype) + " piece " + std::to_string(piece));
            const Grads got = backward(*t.k, c, true, piece, 0);
            ASSERT_TRUE(same_grads(got, want));
          }
      }
}

// Subnormal fp32 results (the inputs scaled near 2^-126): each rounds to its bf16
// (a subnormal too), never to zero, whatever rounds the table's outputs. Tokens
// 0-2 whole, token 3 in one column (one lane of a vector), tokens 4-5 as drawn.
TEST(PostTables, SubnormalResultsGiveTheReferenceBits) {
  const std::vector<Table> all = tables();
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (int64_t D : {64, 300}) {
      const int64_t T = 6, N = 4;
      Case c = make_case(T, N, D, dtype, true, dtype, uint64_t(D * 5 + int(dtype)));
      const float tiny = std::ldexp(1.0f, -127);
      auto scale = [&](Raw& r, int64_t at) { r.set(at, r.get(at) * tiny); };
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t d = 0; d < D; ++d) {
          if (t == 3 && d != 17) continue;
          for (int64_t n = 0; n < N; ++n) {
            scale(c.x, t * c.token_stride + n * c.stream_stride + d);
            scale(c.grad_out, t * c.token_stride + n * c.stream_stride + d);
          }
          scale(c.h_out, t * c.token_stride + d);
        }
      const Raw want_out = forward(reference_table(), c, T, D);
      const Grads want = backward(reference_table(), c, true, T, 0);
      if (dtype == DType::bf16) {  // the case holds what it says: nonzero subnormal outputs
        int64_t subnormal = 0;
        for (int64_t i = 0; i < T * c.token_stride; ++i)
          subnormal += std::fpclassify(want.grad_x.get(i)) == FP_SUBNORMAL;
        ASSERT_GT(subnormal, D);
      }
      for (const Table& t : all) {
        SCOPED_TRACE(t.name + " " + mhc::core::dtype_name(dtype) + " D " + std::to_string(D));
        ASSERT_TRUE(same_bytes(forward(*t.k, c, T, D), want_out, "out"));
        const Grads got = backward(*t.k, c, true, T, 0);
        ASSERT_TRUE(same_grads(got, want));
      }
    }
}

}  // namespace
}  // namespace mhc_kernel_test
