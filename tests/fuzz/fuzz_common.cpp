// The fuzz targets' shared machinery: generation of one call from bytes, the
// arena, and the checks after a call (see fuzz_common.hpp).
#include "fuzz_common.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "common/described_call.hpp"
#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "mhc/mhc.h"
#include "ops/pre/backward.hpp"
#include "ops/pre/forward.hpp"
#include "strided_io.hpp"

namespace mhc_fuzz {

namespace {
std::string g_case;  // what the current input is, for failure messages
}

void describe(const Case& c) {
  const Problem& p = c.problem;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s %s B=%lld S=%lld N=%lld D=%lld F=%lld x=%s gamma=%d caches=%d grad_x_post=%d norm_eps=%g "
                "hc_eps=%g threads=%d arena=%zu special=%d",
                p.op == Op::forward ? "forward" : "backward", p.bsnd ? "BSND" : "TND", (long long)p.B,
                (long long)p.S, (long long)p.N, (long long)p.D, (long long)p.F(),
                mhc::core::dtype_name(p.x_dtype), p.gamma, p.caches, p.grad_x_post, p.norm_eps, p.hc_eps,
                p.threads, c.arena_bytes, c.special_rate);
  g_case = buf;
  for (const Tensor& t : c.tensors) {
    if (!t.present) { g_case += std::string("\n  ") + t.name + ": absent"; continue; }
    g_case += std::string("\n  ") + t.name + ": dtype " + std::to_string(t.dtype) + " rank " + std::to_string(t.rank) + " shape";
    for (int i = 0; i < std::clamp(t.rank, 0, kRankCap); ++i) g_case += " " + std::to_string(t.shape[i]);
    g_case += " strides";
    for (int i = 0; i < std::clamp(t.rank, 0, kRankCap); ++i) g_case += " " + std::to_string(t.strides[i]);
    g_case += " at " + std::to_string(t.byte_offset) + (t.null_data ? " (NULL)" : "");
    if (t.format != 2 || t.acl_dtype != 0 || t.acl_offset != 0)  // aclnn
      g_case += " acl_dtype " + std::to_string(t.acl_dtype) + " format " + std::to_string(t.format) + " offset " +
                std::to_string(t.acl_offset) + (t.storage_given ? " storage" : " no-storage") +
                (t.strides_given ? "" : " default-strides");
  }
  static const bool verbose = std::getenv("MHC_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "case: %s\n", g_case.c_str());
}

void describe_more(const std::string& text) {
  g_case += "\n  " + text;
  static const bool verbose = std::getenv("MHC_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "  %s\n", text.c_str());
}

void fail(const std::string& what) {
  std::fprintf(stderr, "mhc fuzz check failed: %s\ncase: %s\n", what.c_str(), g_case.c_str());
  std::fflush(stderr);
  std::abort();
}

int64_t Problem::R() const {
  if (form == FForm::two_entry || form == FForm::head) return 0;
  if (form == FForm::square) return N * N;
  int64_t f = 1;
  for (int64_t i = 2; i <= N; ++i) f *= i;
  return f;
}

Tensor* Case::find(const char* name) {
  for (Tensor& t : tensors)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}
const Tensor* Case::find(const char* name) const { return const_cast<Case*>(this)->find(name); }

bool ignored_by_call(const Case& c, const Tensor& t) {
  if (std::strcmp(t.name, "h_res") != 0 && std::strcmp(t.name, "grad_h_res") != 0) return false;
  const Tensor* alpha = c.find("alpha");
  if (alpha == nullptr) return false;
  int64_t entries = 1;  // an accepted call's alpha: rank 1, at most 3 entries
  for (int i = 0; i < alpha->rank; ++i) entries *= alpha->shape[i];
  return entries != 3;
}

int64_t element_size_of(int32_t dtype) {
  switch (dtype) {
    case MHC_BF16: case MHC_FP16: return 2;
    case MHC_FP32: return 4;
    default: return 0;
  }
}

namespace {

constexpr size_t kMaxArena = size_t(1) << 20;
constexpr int64_t kHuge = int64_t(1) << 40;  // an offset past this never fits an arena

// ------------------------------------------------------------------ the slots

enum class Inner { none, D, N, ND, F, residual, FK, A, NDplain };

struct SlotSpec {
  const char* name;
  const char* acl_name;
  bool token;      // per-token: leading [B,S] or [T]
  Inner inner;
  bool x_dtype;    // x's dtype, else fp32
  bool output;
  enum Presence { required, gamma, caches, residual, post, grad_x_post } presence;
};

const std::vector<SlotSpec>& forward_slots() {
  static const std::vector<SlotSpec> slots = {
      {"x", "x", true, Inner::ND, true, false, SlotSpec::required},
      {"phi", "phi", false, Inner::FK, false, false, SlotSpec::required},
      {"alpha", "alpha", false, Inner::A, false, false, SlotSpec::required},
      {"bias", "bias", false, Inner::F, false, false, SlotSpec::required},
      {"gamma", "gamma", false, Inner::NDplain, false, false, SlotSpec::gamma},
      {"h_in", "hIn", true, Inner::D, true, true, SlotSpec::required},
      {"h_post", "hPost", true, Inner::N, false, true, SlotSpec::post},
      {"h_res", "hRes", true, Inner::residual, false, true, SlotSpec::residual},
      {"inv_rms", "invRms", true, Inner::none, false, true, SlotSpec::caches},
      {"h_mix", "hMix", true, Inner::F, false, true, SlotSpec::caches},
      {"h_pre", "hPre", true, Inner::N, false, true, SlotSpec::caches},
  };
  return slots;
}

const std::vector<SlotSpec>& backward_slots() {
  static const std::vector<SlotSpec> slots = {
      {"x", "x", true, Inner::ND, true, false, SlotSpec::required},
      {"phi", "phi", false, Inner::FK, false, false, SlotSpec::required},
      {"alpha", "alpha", false, Inner::A, false, false, SlotSpec::required},
      {"grad_h_in", "gradHIn", true, Inner::D, true, false, SlotSpec::required},
      {"grad_h_post", "gradHPost", true, Inner::N, false, false, SlotSpec::post},
      {"grad_h_res", "gradHRes", true, Inner::residual, false, false, SlotSpec::residual},
      {"inv_rms", "invRms", true, Inner::none, false, false, SlotSpec::required},
      {"h_mix", "hMix", true, Inner::F, false, false, SlotSpec::required},
      {"h_pre", "hPre", true, Inner::N, false, false, SlotSpec::required},
      {"h_post", "hPost", true, Inner::N, false, false, SlotSpec::post},
      {"gamma", "gamma", false, Inner::NDplain, false, false, SlotSpec::gamma},
      {"grad_x_post", "gradXPost", true, Inner::ND, true, false, SlotSpec::grad_x_post},
      {"grad_x", "gradX", true, Inner::ND, true, true, SlotSpec::required},
      {"grad_phi", "gradPhi", false, Inner::FK, false, true, SlotSpec::required},
      {"grad_alpha", "gradAlpha", false, Inner::A, false, true, SlotSpec::required},
      {"grad_bias", "gradBias", false, Inner::F, false, true, SlotSpec::required},
      {"grad_gamma", "gradGamma", false, Inner::NDplain, false, true, SlotSpec::gamma},
  };
  return slots;
}

std::vector<int64_t> nominal_shape(const SlotSpec& s, const Problem& p) {
  std::vector<int64_t> shape;
  if (s.token) {
    if (p.bsnd) shape = {p.B, p.S};
    else shape = {p.T()};
  }
  const int64_t N = p.N, D = p.D, F = p.F(), R = p.R(), K = p.K();
  switch (s.inner) {
    case Inner::none: break;
    case Inner::D: shape.push_back(D); break;
    case Inner::N: shape.push_back(N); break;
    case Inner::ND: case Inner::NDplain: shape.push_back(N); shape.push_back(D); break;
    case Inner::F: shape.push_back(F); break;
    case Inner::FK: shape.push_back(F); shape.push_back(K); break;
    case Inner::A: shape.push_back(p.alpha_entries()); break;
    case Inner::residual:
      if (R == N * N && !p.flat_residual) { shape.push_back(N); shape.push_back(N); }
      else shape.push_back(R);
      break;
  }
  return shape;
}

bool nominal_presence(const SlotSpec& s, const Problem& p) {
  switch (s.presence) {
    case SlotSpec::required: return true;
    case SlotSpec::gamma: return p.gamma;
    case SlotSpec::caches: return p.caches;
    case SlotSpec::residual: return p.alpha_entries() == 3;
    case SlotSpec::post: return p.form != FForm::head;
    case SlotSpec::grad_x_post: return p.grad_x_post;
  }
  return true;
}

int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
  return r;
}

int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b < 0 ? INT64_MIN : INT64_MAX;
  return r;
}

// Contiguous strides; saturated where the products overflow.
void contiguous(Tensor& t) {
  int64_t stride = 1;
  for (int i = std::min(t.rank, kRankCap) - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride = sat_mul(stride, t.shape[i]);
  }
}

// The layout of a nominal tensor: contiguous, padded, permuted, every other
// element, broadcast token dims (stride 0) or garbage strides on extent-1 dims.
void choose_layout(Bytes& in, Tensor& t, bool token, bool bsnd) {
  contiguous(t);
  const int r = t.rank;
  switch (in.pick(8)) {
    case 3: {  // padded: every outer stride grows by a few elements
      int64_t stride = 1;
      for (int i = r - 1; i >= 0; --i) {
        t.strides[i] = stride;
        stride = sat_add(sat_mul(stride, t.shape[i]), i < r - 1 || r == 1 ? int64_t(1 + in.pick(3)) : 0);
      }
      break;
    }
    case 4: {  // dims stored in another physical order
      int order[kRankCap];
      for (int i = 0; i < r; ++i) order[i] = i;
      for (int i = r - 1; i > 0; --i) std::swap(order[i], order[in.pick(size_t(i + 1))]);
      int64_t stride = 1;
      for (int i = r - 1; i >= 0; --i) {
        t.strides[order[i]] = stride;
        stride = sat_mul(stride, t.shape[order[i]]);
      }
      break;
    }
    case 5:
      for (int i = 0; i < r; ++i) t.strides[i] = sat_mul(t.strides[i], 2);
      break;
    case 6:  // broadcast over tokens (an input may; an output is rejected)
      if (token) for (int i = 0; i < (bsnd ? 2 : 1) && i < r; ++i) t.strides[i] = 0;
      break;
    case 7: {  // a dim of extent 1 has a stride nobody may use
      static const int64_t garbage[] = {INT64_MIN, -7, INT64_MAX, 0, int64_t(1) << 62};
      for (int i = 0; i < r; ++i)
        if (t.shape[i] == 1) t.strides[i] = garbage[in.pick(5)];
      break;
    }
    default: break;
  }
}

int32_t random_invalid_dtype(Bytes& in) {
  static const int32_t codes[] = {3, -1, 27, 100, INT32_MIN, 7};
  return codes[in.pick(6)];
}

// The arena's size from the placement's cursor, then each tensor's offset brought
// inside it (and misaligned or pushed to the end where the mutations asked), then
// the aliases onto their targets. Reads no input.
void settle_placement(Case& c, int64_t cursor, const std::vector<int64_t>& request,
                      const std::vector<std::pair<int, int>>& aliases) {
  c.arena_bytes = size_t(std::min<int64_t>(cursor, int64_t(kMaxArena)));
  for (size_t s = 0; s < c.tensors.size(); ++s) {
    Tensor& t = c.tensors[s];
    const int64_t esize = std::max<int64_t>(2, element_size_of(t.dtype));
    if (c.arena_bytes == 0) { t.byte_offset = 0; continue; }
    if (t.byte_offset >= int64_t(c.arena_bytes)) t.byte_offset = t.byte_offset % int64_t(c.arena_bytes) / esize * esize;
    if (request[s] == 1 || request[s] == 2) t.byte_offset = std::min<int64_t>(t.byte_offset + request[s], c.arena_bytes - 1);
    if (request[s] == 3) t.byte_offset = std::max<int64_t>(0, int64_t(c.arena_bytes) - esize);
  }
  for (auto [self, other] : aliases) {
    Tensor& t = c.tensors[self];
    const bool exact = other < 0;
    const Tensor& o = c.tensors[exact ? -1 - other : other];
    t.byte_offset = o.byte_offset;
    t.null_data = o.null_data;
    if (exact) {
      t.rank = o.rank;
      std::copy(o.shape, o.shape + kRankCap, t.shape);
      std::copy(o.strides, o.strides + kRankCap, t.strides);
      t.dtype = o.dtype;
      t.present = o.present;
    }
  }
}

// One mutation of a generated tensor.
void mutate(Bytes& in, Tensor& t, bool aclnn, std::vector<std::pair<int, int>>* aliases, int self, int count) {
  const int kind = int(in.pick(32));
  const int r = std::clamp(t.rank, 0, kRankCap);
  const int i = r > 0 ? int(in.pick(size_t(r))) : 0;
  static const int64_t big_dims[] = {0, -1, int64_t(1) << 31, int64_t(1) << 62, INT64_MAX, INT64_MIN,
                                     int64_t(1) << 44, 3037000500};  // the last squared overflows
  static const int64_t big_strides[] = {0, -1, int64_t(1) << 40, INT64_MAX, INT64_MIN, int64_t(1) << 62};
  switch (kind) {
    case 0: t.dtype = MHC_FP32; break;
    case 1: t.dtype = MHC_BF16; break;
    case 2: t.dtype = MHC_FP16; break;
    case 3: t.dtype = random_invalid_dtype(in); break;
    case 4: if (t.rank >= 0 && t.rank < kRankCap) { t.shape[t.rank] = 1 + int64_t(in.pick(2)); t.strides[t.rank] = 1; ++t.rank; } break;
    case 5: if (t.rank > 0) --t.rank; break;
    case 6: t.rank = kRankCap; break;
    case 7: if (!aclnn) t.rank = in.flag() ? -1 : INT32_MAX; else t.rank = 0; break;
    case 8: case 9: case 10: case 11: case 12:
      if (r > 0) t.shape[i] = big_dims[in.pick(8)];
      break;
    case 13: if (r > 0 && t.shape[i] > INT64_MIN && t.shape[i] < INT64_MAX) t.shape[i] += in.flag() ? 1 : -1; break;
    case 14: if (r > 0) t.shape[i] = 0; break;
    case 15:  // the element count just overflows
      if (r > 0) {
        int64_t others = 1;
        for (int j = 0; j < r; ++j)
          if (j != i && t.shape[j] > 0) others = sat_mul(others, t.shape[j]);
        t.shape[i] = others > 1 ? INT64_MAX / others + 1 : INT64_MAX;
      }
      break;
    case 16: case 17: case 18: case 19:
      if (r > 0) t.strides[i] = big_strides[in.pick(6)];
      break;
    case 20: if (r > 0 && t.strides[i] != INT64_MIN) t.strides[i] = -t.strides[i]; break;
    case 21: if (r > 0) t.strides[i] /= 2; break;  // rows overlap
    case 22: if (r > 0) t.strides[i] = 1; break;
    case 23: t.null_data = true; break;
    case 24: t.byte_offset = 1; break;  // misaligned by one byte (applied at placement)
    case 25: t.byte_offset = 2; break;  // by two bytes (fp32 only)
    case 26: t.present = !t.present; break;
    case 27: case 28:  // share memory with another tensor (28: an exact copy of its view)
      if (count > 1) {
        int other = int(in.pick(size_t(count)));
        if (other == self) other = (other + 1) % count;
        aliases->push_back({self, kind == 28 ? -1 - other : other});
      }
      break;
    case 29: t.byte_offset = 3; break;  // placed at the arena's very end (applied at placement)
    case 30: if (aclnn) t.format = in.flag() ? 29 : int32_t(in.u8()) - 64; break;
    case 31: if (aclnn) t.acl_offset = in.flag() ? -1 : INT64_MAX / 2; break;
  }
}

// Smallest and largest element offsets of a view; false if not computable
// (invalid rank or beyond kHuge).
bool offset_range(const Tensor& t, int64_t* lo, int64_t* hi, bool* empty) {
  *lo = *hi = 0;
  *empty = false;
  if (t.rank < 0 || t.rank > MHC_MAX_RANK) return false;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) return false;
    if (t.shape[i] == 0) *empty = true;
  }
  if (*empty) return true;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 1) continue;
    if (t.shape[i] > kHuge) return false;
    __int128 span = __int128(t.shape[i] - 1) * t.strides[i];
    if (span > kHuge || span < -kHuge) return false;
    if (span < 0) *lo += int64_t(span);
    else *hi += int64_t(span);
    if (*lo < -kHuge || *hi > kHuge) return false;
  }
  return true;
}

int32_t acl_dtype_of(Bytes& in, int32_t mhc_dtype) {
  switch (mhc_dtype) {
    case MHC_BF16: return 27;   // ACL_BF16
    case MHC_FP16: return 1;    // ACL_FLOAT16
    case MHC_FP32: return 0;    // ACL_FLOAT
    default: {
      static const int32_t codes[] = {2, 3, 9, 11, 12, 99, -1, 4};  // int8, int32, int64, double, bool, ...
      return codes[in.pick(8)];
    }
  }
}

// aclnn: a tensor whose format no mutation set gets one of the plain formats.
void choose_plain_format(Bytes& in, Tensor& t) {
  static const int32_t plain_formats[] = {2, 2, 2, 0, 1, 16, 27, 30};
  if (t.format == 2) t.format = plain_formats[in.pick(8)];
}

// The aclnn part of a tensor: its aclDataType, storage dims (exact, short,
// all that is left, 2-D, odd, none) and whether aclCreateTensor makes its strides.
void choose_acl_descriptors(Bytes& in, Case& c) {
  for (Tensor& t : c.tensors) {
    const int64_t esize = std::max<int64_t>(2, element_size_of(t.dtype));
    t.acl_dtype = acl_dtype_of(in, t.dtype);
    if (t.acl_offset < 0 || t.acl_offset > 3 || t.acl_offset * esize > t.byte_offset) {
      // A storage start outside the arena is not representable: keep the
      // requested oddity only when it cannot move the pointer out.
      if (t.acl_offset != -1 && t.acl_offset != INT64_MAX / 2) t.acl_offset = 0;
    }
    const int64_t base = t.acl_offset >= 0 && t.acl_offset <= 3 ? t.byte_offset - t.acl_offset * esize
                                                                 : t.byte_offset;
    const int64_t available = std::max<int64_t>(0, (int64_t(c.arena_bytes) - base) / esize);
    int64_t lo, hi;
    bool empty;
    int64_t needed = 1;
    if (offset_range(t, &lo, &hi, &empty) && !empty && t.acl_offset >= 0 && t.acl_offset <= 3)
      needed = t.acl_offset + hi + 1;
    int64_t storage = std::min(needed + int64_t(in.pick(3)), available);
    switch (in.u8() >> 5) {
      case 1: storage = std::min(needed - 1, available); break;  // one element short
      case 2: storage = available; break;
      case 3: t.storage = {2, storage / 2}; break;
      case 4: {  // no storage: empty, negative, or an element count past 64 bits
        static const std::vector<int64_t> odd[] = {{0}, {-1}, {-2, -3}, {INT64_MAX, 2, 0}, {INT64_MAX, 4}};
        t.storage = odd[in.pick(5)];
        break;
      }
      case 5: t.storage_given = false; break;  // only kept if the view fits (below)
      default: break;
    }
    if (t.storage.empty()) t.storage = {std::max<int64_t>(storage, 0)};
    if (t.storage.size() == 2 && t.storage[1] * 2 > available) t.storage[1] = available / 2;
    // Contiguous views may leave the strides to aclCreateTensor.
    Tensor contiguous_copy = t;
    contiguous(contiguous_copy);
    t.strides_given = !(std::equal(t.strides, t.strides + std::clamp(t.rank, 0, kRankCap), contiguous_copy.strides) &&
                        in.chance(96));
    if (!t.strides_given) std::copy(contiguous_copy.strides, contiguous_copy.strides + kRankCap, t.strides);
  }
}

}  // namespace

Case generate(Bytes& in, Op op, bool aclnn) {
  Case c;
  Problem& p = c.problem;
  p.op = op;
  static const int64_t Ns[] = {4, 1, 2, 3, 5, 8, 6, 7};
  static const int64_t Ds[] = {8, 1, 2, 3, 4, 5, 7, 16, 17, 31, 33, 64, 100, 257, 300, 513};
  static const int64_t Ss[] = {3, 1, 2, 0, 4, 5, 8, 16, 17, 63, 64, 65, 100, 129, 200, 1};
  static const int64_t Bs[] = {1, 2, 3, 0};
  p.bsnd = in.flag();
  p.B = p.bsnd ? Bs[in.pick(4)] : 1;
  p.S = Ss[in.pick(16)];
  p.N = Ns[in.pick(8)];
  p.D = Ds[in.pick(16)];
  p.form = FForm(in.pick(aclnn ? 3 : 4));  // the aclnn face has no head (it rejects a one-entry alpha)
  if (p.form == FForm::permutation && p.N > 6) p.form = FForm::square;
  static const mhc::DType x_types[] = {mhc::DType::bf16, mhc::DType::fp16, mhc::DType::fp32};
  p.x_dtype = x_types[in.pick(aclnn ? 2 : 3)];
  const uint8_t flags = in.u8();
  p.gamma = !(flags & 1);
  p.caches = !(flags & 2);
  p.grad_x_post = !(flags & 4);
  p.flat_residual = flags & 8;
  static const double eps[] = {1e-6, 0.0, 1e-3, 0.5, 1e-30, 1e30, -1.0,
                               std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()};
  const size_t e = in.pick(32);
  p.norm_eps = e < 9 ? eps[e] : 1e-6;
  const size_t h = in.pick(32);
  p.hc_eps = h < 9 ? eps[h] : 1e-6;
  static const int threads[] = {0, 1, 2, 3, 4, 7, -1, INT_MAX};
  p.threads = threads[in.pick(8)];
  if (aclnn) {  // aclnn has no thread count, and takes hcEps as float in the backward
    p.threads = 0;
    if (op == Op::backward) p.hc_eps = double(float(p.hc_eps));
  }
  // Keep accepted calls small: the reference is float64 and serial.
  // (x at most 2^14 elements, phi 2^15, and T*F*K, the reference's work, 2^19.)
  auto too_big = [&] { return p.T() * p.K() > (1 << 14) || p.F() * p.K() > (1 << 15) || p.T() * p.F() * p.K() > (1 << 19); };
  while (too_big() && p.D > 1) p.D = (p.D + 1) / 2;
  while (too_big() && p.S > 1) p.S = (p.S + 1) / 2;

  const std::vector<SlotSpec>& slots = op == Op::forward ? forward_slots() : backward_slots();
  const int count = int(slots.size());
  std::vector<std::pair<int, int>> aliases;
  for (int s = 0; s < count; ++s) {
    const SlotSpec& spec = slots[s];
    Tensor t;
    t.name = spec.name;
    t.acl_name = spec.acl_name;
    t.output = spec.output;
    t.present = nominal_presence(spec, p);
    t.dtype = spec.x_dtype ? int32_t(p.x_dtype) : MHC_FP32;
    const std::vector<int64_t> shape = nominal_shape(spec, p);
    t.rank = int32_t(shape.size());
    std::copy(shape.begin(), shape.end(), t.shape);
    choose_layout(in, t, spec.token, p.bsnd);
    t.byte_offset = 0;  // 1, 2, 3: placement requests of the mutations
    while (in.chance(28)) mutate(in, t, aclnn, &aliases, s, count);
    if (aclnn) choose_plain_format(in, t);
    c.tensors.push_back(t);
  }

  // Placement: one after the other with small gaps, each aligned to its element
  // size, so that most calls have disjoint tensors that fit.
  int64_t cursor = int64_t(in.pick(4)) * 4;
  std::vector<int64_t> request(c.tensors.size());
  for (size_t s = 0; s < c.tensors.size(); ++s) {
    Tensor& t = c.tensors[s];
    request[s] = t.byte_offset;
    const int64_t esize = std::max<int64_t>(2, element_size_of(t.dtype));
    cursor = (cursor + esize - 1) / esize * esize;
    int64_t lo, hi;
    bool empty;
    if (!t.present) {
      t.byte_offset = 0;
    } else if (!offset_range(t, &lo, &hi, &empty) || empty) {
      t.byte_offset = cursor;
      cursor += esize;
    } else {
      const int64_t lead = t.acl_offset > 0 && t.acl_offset < 4 ? t.acl_offset : 0;
      t.byte_offset = cursor + (lead - lo) * esize;
      cursor = t.byte_offset + (hi + 1) * esize + int64_t(in.pick(3)) * esize;
    }
    if (aclnn && t.acl_offset == 0) t.acl_offset = int64_t(in.pick(6)) < 2 ? int64_t(in.pick(4)) : 0;
  }
  settle_placement(c, cursor, request, aliases);
  // The one allowed alias, grad_x accumulating into grad_x_post in place, now and then.
  if (op == Op::backward && p.grad_x_post && in.chance(24)) {
    Tensor& gx = *c.find("grad_x");
    const Tensor& gxp = *c.find("grad_x_post");
    gx.byte_offset = gxp.byte_offset;
    gx.rank = gxp.rank;
    std::copy(gxp.shape, gxp.shape + kRankCap, gx.shape);
    std::copy(gxp.strides, gxp.strides + kRankCap, gx.strides);
    gx.dtype = gxp.dtype;
    gx.null_data = gxp.null_data;
  }

  if (aclnn) choose_acl_descriptors(in, c);
  c.value_seed = in.u64();
  const uint8_t special = in.u8();
  c.special_rate = special < 160 ? 0 : (special - 159) / 4;
  return c;
}

// The layer's targets: the same layouts, mutations and placement for their slots.
void lay_out(Bytes& in, Case& c, const std::vector<Slot>& slots, bool bsnd, bool aclnn, std::vector<int>* mutations) {
  const int count = int(slots.size());
  std::vector<std::pair<int, int>> aliases;
  for (int s = 0; s < count; ++s) {
    const Slot& spec = slots[s];
    Tensor t;
    t.name = spec.name;
    t.acl_name = spec.name;
    t.output = spec.output;
    t.present = spec.present;
    t.dtype = spec.dtype;
    t.rank = int32_t(spec.shape.size());
    std::copy(spec.shape.begin(), spec.shape.end(), t.shape);
    choose_layout(in, t, spec.token, bsnd);
    t.byte_offset = 0;
    int mutated = 0;
    for (; in.chance(28); ++mutated) mutate(in, t, aclnn, &aliases, s, count);
    if (aclnn) choose_plain_format(in, t);
    if (mutations != nullptr) mutations->push_back(mutated);
    c.tensors.push_back(t);
  }
  int64_t cursor = int64_t(in.pick(4)) * 4;
  std::vector<int64_t> request(c.tensors.size());
  for (size_t s = 0; s < c.tensors.size(); ++s) {
    Tensor& t = c.tensors[s];
    request[s] = t.byte_offset;
    const int64_t esize = std::max<int64_t>(2, element_size_of(t.dtype));
    cursor = (cursor + esize - 1) / esize * esize;
    int64_t lo, hi;
    bool empty;
    if (!t.present) {
      t.byte_offset = 0;
    } else if (!offset_range(t, &lo, &hi, &empty) || empty) {
      t.byte_offset = cursor;
      cursor += esize;
    } else {
      t.byte_offset = cursor - lo * esize;
      cursor = t.byte_offset + (hi + 1) * esize + int64_t(in.pick(3)) * esize;
    }
    if (aclnn && t.acl_offset == 0) t.acl_offset = int64_t(in.pick(6)) < 2 ? int64_t(in.pick(4)) : 0;
  }
  settle_placement(c, cursor, request, aliases);
  if (aclnn) choose_acl_descriptors(in, c);
  c.value_seed = in.u64();
  const uint8_t special = in.u8();
  c.special_rate = special < 160 ? 0 : (special - 159) / 4;
}

// ------------------------------------------------------------------ the arena

namespace {

uint64_t splitmix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Arena::Arena(const Case& c) : bytes(c.arena_bytes) {
  // Exactly `bytes` of heap: one past the end is already in ASan's redzone.
  base = static_cast<uint8_t*>(std::malloc(bytes == 0 ? 1 : bytes));
  if (base == nullptr) fail("arena allocation");
  // bf16 patterns of 0, +-1/4, +-1/2, +-3/4, +-1, +-5/4, +-3/2, +-2, +-3: read as
  // fp32 (two halves) or fp16 they stay small too.
  static const uint16_t nice[] = {0x0000, 0x0000, 0x3E80, 0x3F00, 0x3F40, 0x3F80, 0x3FA0, 0x3FC0, 0x4000,
                                  0x4040, 0xBE80, 0xBF00, 0xBF40, 0xBF80, 0xBFA0, 0xBFC0, 0xC000, 0xC040};
  static const uint16_t specials[] = {0x7FC0, 0x7F80, 0xFF80, 0x8000, 0xFFC0, 0x7FA0};  // NaN, +Inf, -Inf, -0, -NaN, sNaN
  uint64_t state = c.value_seed;
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    const uint64_t r = splitmix(&state);
    const uint16_t v = int(r % 1024) < c.special_rate ? specials[(r >> 10) % 6] : nice[(r >> 16) % 18];
    std::memcpy(base + i, &v, 2);
  }
  if (bytes % 2) base[bytes - 1] = 0;
  // No fp32 subnormals: an fp32 element (4-byte aligned) whose upper half is +-0
  // gets a zero lower half. Subnormal inputs are fine for the library, but fp32
  // underflows where float64 does not (x*x = 0, so inv_rms = Inf with norm_eps 0),
  // which no tolerance on the float64 reference can express.
  for (size_t i = 0; i + 3 < bytes; i += 4)
    if ((base[i + 3] & 0x7F) == 0 && (base[i + 2] & 0x80) == 0) base[i] = base[i + 1] = base[i + 2] = 0;
  pristine.assign(base, base + bytes);
}

Arena::~Arena() { std::free(base); }

bool Arena::unchanged() const { return bytes == 0 || std::memcmp(base, pristine.data(), bytes) == 0; }

bool view_inside(const uint8_t* base, size_t bytes, const uint8_t* data, int32_t dtype, int32_t rank,
                 const int64_t* shape, const int64_t* strides) {
  Tensor t;
  t.rank = rank;
  for (int i = 0; i < std::clamp(rank, 0, kRankCap); ++i) {
    t.shape[i] = shape[i];
    t.strides[i] = strides[i];
  }
  int64_t lo, hi;
  bool empty;
  if (!offset_range(t, &lo, &hi, &empty)) return false;
  if (empty) return true;
  const int64_t esize = std::max<int64_t>(1, element_size_of(dtype));
  if (data == nullptr) return false;
  const __int128 start = __int128(data - base) + __int128(lo) * esize;
  const __int128 end = __int128(data - base) + (__int128(hi) + 1) * esize;
  return start >= 0 && end <= __int128(bytes);
}

mhc::TensorView view_of(const Tensor& t, uint8_t* base) {
  mhc::TensorView v;
  v.data = t.null_data ? nullptr : base + t.byte_offset;
  v.dtype = static_cast<mhc::DType>(t.dtype);
  v.rank = t.rank;
  for (int i = 0; i < std::clamp(t.rank, 0, mhc::kMaxRank); ++i) {
    v.shape[i] = t.shape[i];
    v.strides[i] = t.strides[i];
  }
  return v;
}

namespace {

std::optional<mhc::TensorView> optional_of(Case& c, const char* name, uint8_t* base) {
  const Tensor* t = c.find(name);
  if (!t->present) return std::nullopt;
  return view_of(*t, base);
}

// A required argument of the C++ API cannot be absent: an "absent" one is an empty view.
mhc::TensorView required_of(Case& c, const char* name, uint8_t* base) {
  const Tensor* t = c.find(name);
  return t->present ? view_of(*t, base) : mhc::TensorView{};
}

mhc::Options options_of(const Problem& p) {
  mhc::Options o;
  o.norm_eps = p.norm_eps;
  o.hc_eps = p.hc_eps;
  o.num_threads = p.threads;
  return o;
}

}  // namespace

ForwardCall forward_call(Case& c, uint8_t* base) {
  ForwardCall call;
  call.in = {required_of(c, "x", base), required_of(c, "phi", base), required_of(c, "alpha", base),
             required_of(c, "bias", base), optional_of(c, "gamma", base)};
  call.out = {required_of(c, "h_in", base), optional_of(c, "h_post", base), optional_of(c, "h_res", base),
              optional_of(c, "inv_rms", base), optional_of(c, "h_mix", base), optional_of(c, "h_pre", base)};
  call.options = options_of(c.problem);
  return call;
}

BackwardCall backward_call(Case& c, uint8_t* base) {
  BackwardCall call;
  call.in = {required_of(c, "x", base), required_of(c, "phi", base), required_of(c, "alpha", base),
             required_of(c, "grad_h_in", base), optional_of(c, "grad_h_post", base),
             optional_of(c, "grad_h_res", base), required_of(c, "inv_rms", base), required_of(c, "h_mix", base),
             required_of(c, "h_pre", base), optional_of(c, "h_post", base), optional_of(c, "gamma", base),
             optional_of(c, "grad_x_post", base)};
  call.out = {required_of(c, "grad_x", base), required_of(c, "grad_phi", base),
              required_of(c, "grad_alpha", base), required_of(c, "grad_bias", base),
              optional_of(c, "grad_gamma", base)};
  call.options = options_of(c.problem);
  return call;
}

// ------------------------------------------------------------------ checks after an accepted call

namespace {

using mhc::core::Strided;

// Every element offset of a view (rank <= 8, inside the arena).
template <class Fn>
void for_each_element(const mhc::TensorView& v, Fn fn) {
  int64_t numel = 1;
  for (int i = 0; i < v.rank; ++i) numel *= v.shape[i];
  for (int64_t linear = 0; linear < numel; ++linear) {
    int64_t rest = linear, offset = 0;
    for (int i = v.rank - 1; i >= 0; --i) {
      offset += (rest % v.shape[i]) * v.strides[i];
      rest /= v.shape[i];
    }
    fn(offset);
  }
}

// Bytes of the arena covered by the output views (the only ones a call may write).
std::vector<uint8_t> output_mask(Case& c, const Arena& arena) {
  std::vector<uint8_t> mask(arena.bytes, 0);
  for (const Tensor& t : c.tensors) {
    if (!t.output || !t.present || ignored_by_call(c, t)) continue;  // an ignored output stays as it was
    const mhc::TensorView v = view_of(t, arena.base);
    const int64_t esize = element_size_of(t.dtype);
    for_each_element(v, [&](int64_t offset) {
      const int64_t at = t.byte_offset + offset * esize;
      for (int64_t b = 0; b < esize; ++b) mask[size_t(at + b)] = 1;
    });
  }
  return mask;
}

void check_writes_only_outputs(Case& c, const Arena& arena, const uint8_t* after, const char* what) {
  const std::vector<uint8_t> mask = output_mask(c, arena);
  for (size_t i = 0; i < arena.bytes; ++i)
    if (!mask[i] && after[i] != arena.pristine[i])
      fail(std::string(what) + ": byte " + std::to_string(i) + " of the arena changed but is no output's");
}

double ulp_of(mhc::DType t, double v) {
  const int mantissa = t == mhc::DType::fp32 ? 23 : t == mhc::DType::fp16 ? 10 : 7;
  const int min_exp = t == mhc::DType::fp16 ? -14 : -126;
  const double a = std::fabs(v);
  int e = a > 0 && std::isfinite(a) ? std::ilogb(a) : min_exp;
  if (e < min_exp) e = min_exp;
  return std::ldexp(1.0, e - mantissa);
}

// Relative slack on the sum of |terms|: fp32 sums of up to a few thousand terms
// stay far below it; a wrong element is off by O(1).
constexpr double kRel = 1e-3;

double max_finite(mhc::DType t) { return t == mhc::DType::fp16 ? 65504.0 : t == mhc::DType::bf16 ? 3.3895e38 : 3.4028e38; }

// NaN where the reference has NaN. With a finite tolerance, |lib - ref| within it,
// an infinity counting as the dtype's largest value (a result within the tolerance
// may overflow either way). With an infinite one (Inf among the inputs): the same
// class, finite, +Inf, -Inf or NaN.
bool agrees(double lib, double ref, double tol, mhc::DType dtype) {
  if (std::isnan(ref)) return std::isnan(lib);
  // Terms past fp32's range: the library's fp32 arithmetic overflows where float64
  // does not (hc_eps = 1e30 makes sigma(1 - sigma) ~ 1e59), so any result, NaN too.
  if (std::isfinite(tol) && tol >= kRel * 3.4e38) return true;
  if (std::isnan(lib)) return false;
  if (!std::isfinite(tol)) {
    if (std::isinf(ref) || std::isinf(lib)) return lib == ref;
    return true;
  }
  const double top = max_finite(dtype);
  if (std::isinf(lib)) lib = std::copysign(top, lib);
  if (std::isinf(ref)) ref = std::copysign(top, ref);
  // (1e-30: fp32 results near the bottom of the range underflow where float64 does not)
  return !(std::fabs(lib - ref) > tol + 1e-30 + ulp_of(dtype, std::fabs(ref) + tol));
}

// Compare one output, element by element: lib is the same tensor in the arena.
struct Compare {
  const char* name;
  Strided ref;  // in the reference's copy
  Strided lib;  // in the arena
};

Strided rebased(const Strided& s, const uint8_t* from, uint8_t* to) {
  Strided r = s;
  if (s.data) r.data = to + (static_cast<const uint8_t*>(s.data) - from);
  return r;
}

[[noreturn]] void disagree(const char* name, const std::string& where, double lib, double ref, double tol) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s%s: library %.9g, reference %.9g, tolerance %.3g", name, where.c_str(), lib,
                ref, tol);
  fail(buf);
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

void check_only_outputs_written(Case& c, const Arena& arena, const uint8_t* after, const char* what) {
  check_writes_only_outputs(c, arena, after, what);
}

void check_outputs_equal(Case& c, const uint8_t* got, const uint8_t* want, const std::string& what) {
  for (const Tensor& t : c.tensors) {
    if (!t.output || !t.present) continue;
    const mhc::TensorView v = view_of(t, const_cast<uint8_t*>(got));
    const int64_t esize = element_size_of(t.dtype);
    int64_t linear = 0;
    for_each_element(v, [&](int64_t offset) {
      const int64_t at = t.byte_offset + offset * esize;
      const double g = mhc::core::load_element(got + at, mhc::DType(t.dtype), 0);
      const double w = mhc::core::load_element(want + at, mhc::DType(t.dtype), 0);
      if (std::memcmp(got + at, want + at, size_t(esize)) != 0 && !(std::isnan(g) && std::isnan(w))) {
        char buf[160];
        std::snprintf(buf, sizeof buf, " element %lld (arena byte %lld): %.9g (bits differ) vs %.9g", (long long)linear,
                      (long long)at, g, w);
        fail(what + ": " + t.name + buf);
      }
      ++linear;
    });
  }
}

void check_accepted_forward(Case& c, const Arena& arena, bool rerun, const Acceptance& how) {
  check_writes_only_outputs(c, arena, arena.base, "forward");
  // The reference on a copy of the arena as it was before the call.
  std::vector<uint8_t> copy(arena.pristine);
  uint8_t* cb = copy.data();
  ForwardCall call = forward_call(c, cb);
  call.options.matmul_precision = how.precision;
  mhc::core::ForwardProblem p;
  const mhc::Status s =
      mhc::ops::pre::forward::validate(call.in, call.out, call.options, &p, {.eps_values = how.eps_values});
  if (!s.ok()) fail("forward: validation of the same call on a copy failed: " + s.message());
  const mhc::core::Dims& d = p.dims;
  const int64_t T = d.T, N = d.N, D = d.D, K = d.K, F = d.F, R = d.R;
  const std::vector<double> x = gather_tokens(p.x, T, N, D);
  const std::vector<double> phi = gather_plain(p.phi, F, K);
  const std::vector<double> alpha = gather_plain(p.alpha, 1, d.alpha_entries());
  const std::vector<double> bias = gather_plain(p.bias, 1, F);
  const std::vector<double> gamma = p.gamma.present() ? gather_plain(p.gamma, N, D) : std::vector<double>(K, 1.0);
  p.isa = mhc::Isa::reference;  // the float64 reference writes the copy's outputs
  if (!mhc::ops::pre::forward::run_in_thread_workspace(p, 1).ok()) fail("forward: the reference failed");

  auto lib_of = [&](const Strided& ref) { return rebased(ref, cb, arena.base); };
  auto check = [&](const char* name, const Strided& ref, int64_t offset, double tol, mhc::DType dtype, int64_t t) {
    const double lib_v = lib_of(ref).load(offset), ref_v = ref.load(offset);
    if (!agrees(lib_v, ref_v, tol, dtype))
      disagree(name, " token " + std::to_string(t) + " offset " + std::to_string(offset), lib_v, ref_v, tol);
  };
  std::vector<double> u(K), mag_mix(F), tol_z(F), h_pre(N), tol_pre(N);
  for (int64_t t = 0; t < T; ++t) {
    const double* v = &x[t * K];
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) { u[k] = v[k] * gamma[k]; ss += v[k] * v[k]; }
    const double r = 1.0 / std::sqrt(ss / double(K) + p.norm_eps);
    for (int64_t f = 0; f < F; ++f) {
      double mag = 0, m = 0;
      for (int64_t k = 0; k < K; ++k) { mag += std::fabs(phi[f * K + k] * u[k]); m += phi[f * K + k] * u[k]; }
      mag_mix[f] = mag;
      const int group = f < N ? 0 : f < 2 * N ? 1 : 2;
      tol_z[f] = kRel * (std::fabs(alpha[group]) * r * mag + std::fabs(bias[f]));
      if (f < N) {
        h_pre[f] = sigmoid(alpha[0] * r * m + bias[f]) + p.hc_eps;
        tol_pre[f] = 0.25 * tol_z[f] + kRel;
      }
    }
    if (p.inv_rms.present()) check("inv_rms", p.inv_rms, p.inv_rms.at(t, 0, 0), kRel * r, mhc::DType::fp32, t);
    for (int64_t f = 0; f < F && p.h_mix.present(); ++f)
      check("h_mix", p.h_mix, p.h_mix.at(t, 0, f), kRel * mag_mix[f], mhc::DType::fp32, t);
    for (int64_t n = 0; n < N; ++n) {
      if (p.h_pre.present()) check("h_pre", p.h_pre, p.h_pre.at(t, 0, n), tol_pre[n], mhc::DType::fp32, t);
      if (p.h_post.present())
        check("h_post", p.h_post, p.h_post.at(t, 0, n), 0.5 * tol_z[N + n] + 2 * kRel, mhc::DType::fp32, t);
    }
    for (int64_t i = 0; i < R && p.h_res.present(); ++i)
      check("h_res", p.h_res, p.h_res.residual_at(t, i), tol_z[2 * N + i], mhc::DType::fp32, t);
    for (int64_t j = 0; j < D; ++j) {
      double mag = 0, slack = 0;
      for (int64_t n = 0; n < N; ++n) {
        mag += std::fabs(h_pre[n] * v[n * D + j]);
        slack += tol_pre[n] * std::fabs(v[n * D + j]);
      }
      check("h_in", p.h_in, p.h_in.at(t, 0, j), kRel * mag + slack, p.h_in.dtype, t);
    }
  }

  if (rerun) {
    // Same call, another thread count, the arena copied to another address, the
    // weights prepared once (prepare_pre: accepted weights are accepted there too).
    std::vector<uint8_t> shifted(arena.bytes + 64 + 48);
    uint8_t* sb = shifted.data() + 16;
    while ((reinterpret_cast<uintptr_t>(sb) - reinterpret_cast<uintptr_t>(arena.base)) % 64 == 0) sb += 16;
    std::memcpy(sb, arena.pristine.data(), arena.bytes);
    ForwardCall again = forward_call(c, sb);
    again.options.num_threads = c.problem.threads == 1 ? 3 : 1;
    again.options.matmul_precision = how.precision;
    std::shared_ptr<const mhc::PreparedPre> prepared;
    const mhc::Status made = mhc::prepare_pre(again.in.phi, again.in.alpha, again.in.bias, again.in.gamma, &prepared);
    if (!made.ok()) fail("forward: prepare_pre refused a validated call's weights: " + made.message());
    again.options.prepared = prepared.get();
    mhc::core::ForwardProblem again_problem;  // through the operator layer: the face's rules
    mhc::Status s2 = mhc::ops::pre::forward::validate(again.in, again.out, again.options, &again_problem,
                                                     {.eps_values = how.eps_values});
    if (s2.ok()) s2 = mhc::ops::pre::forward::run_in_thread_workspace(again_problem, again.options.num_threads);
    if (!s2.ok()) fail("forward rerun failed: " + s2.message());
    if (std::memcmp(sb, arena.base, arena.bytes) != 0) {
      for (size_t i = 0; i < arena.bytes; ++i)
        if (sb[i] != arena.base[i])
          fail("forward: a rerun with num_threads=" + std::to_string(again.options.num_threads) +
               ", prepared weights, at another address differs at arena byte " + std::to_string(i));
    }
  }
}

void check_accepted_backward(Case& c, const Arena& arena, bool rerun, const Acceptance& how) {
  check_writes_only_outputs(c, arena, arena.base, "backward");
  std::vector<uint8_t> copy(arena.pristine);
  uint8_t* cb = copy.data();
  BackwardCall call = backward_call(c, cb);
  call.options.matmul_precision = how.precision;
  mhc::core::BackwardProblem p;
  const mhc::Status s =
      mhc::ops::pre::backward::validate(call.in, call.out, call.options, &p, {.eps_values = how.eps_values});
  if (!s.ok()) fail("backward: validation of the same call on a copy failed: " + s.message());
  const mhc::core::Dims& d = p.dims;
  const int64_t T = d.T, N = d.N, D = d.D, K = d.K, F = d.F, R = d.R;
  const int A = d.alpha_entries();
  const std::vector<double> x = gather_tokens(p.x, T, N, D);
  const std::vector<double> phi = gather_plain(p.phi, F, K);
  const std::vector<double> alpha = gather_plain(p.alpha, 1, A);
  const std::vector<double> gamma = p.gamma.present() ? gather_plain(p.gamma, N, D) : std::vector<double>(K, 1.0);
  const std::vector<double> ghin = gather_tokens(p.grad_h_in, T, 1, D);
  const std::vector<double> ghpost = p.grad_h_post.present() ? gather_tokens(p.grad_h_post, T, 1, N) : std::vector<double>();
  const std::vector<double> ghres = p.grad_h_res.present() ? gather_residual(p.grad_h_res, T, R) : std::vector<double>();
  const std::vector<double> inv_rms = gather_tokens(p.inv_rms, T, 1, 1);
  const std::vector<double> h_mix = gather_tokens(p.h_mix, T, 1, F);
  const std::vector<double> h_pre = gather_tokens(p.h_pre, T, 1, N);
  const std::vector<double> h_post = p.h_post.present() ? gather_tokens(p.h_post, T, 1, N) : std::vector<double>();
  const std::vector<double> gxp = p.grad_x_post.present() ? gather_tokens(p.grad_x_post, T, N, D) : std::vector<double>();
  p.isa = mhc::Isa::reference;  // the float64 reference writes the copy's outputs
  if (!mhc::ops::pre::backward::run_in_thread_workspace(p, 1).ok()) fail("backward: the reference failed");

  auto check = [&](const char* name, const Strided& ref, int64_t offset, double tol, mhc::DType dtype,
                   const std::string& where) {
    const double lib_v = rebased(ref, cb, arena.base).load(offset), ref_v = ref.load(offset);
    if (!agrees(lib_v, ref_v, tol, dtype)) disagree(name, where, lib_v, ref_v, tol);
  };
  // Sums of |terms| (SPEC §3 with every factor replaced by a bound on its magnitude).
  std::vector<double> m_gz(F), m_G(F), m_gu(K), m_phi(F * K, 0.0), m_gamma(K, 0.0), m_bias(F, 0.0), m_alpha(3, 0.0);
  const double eps = std::fabs(p.hc_eps);  // the aclnn face takes any hc_eps, negative ones too
  // A term past fp32's range (hc_eps = 1e30 makes s(1 - s) ~ 1e60) overflows in
  // the library's fp32 arithmetic, where float64 does not: Inf * 0 is then NaN
  // where the reference has 0. What depends on such a token is unconstrained.
  constexpr double kFp32Max = 3.4028234663852886e38, kUnbounded = 1e300;
  bool any_overflow = false;
  for (int64_t t = 0; t < T; ++t) {
    const double* v = &x[t * K];
    const double r = std::fabs(inv_rms[t]);
    bool overflow = false;  // a factor past fp32's range, even one multiplied by 0 (fp32: Inf * 0 = NaN)
    for (int64_t n = 0; n < N; ++n) {
      double g_pre = 0;
      for (int64_t j = 0; j < D; ++j) g_pre += std::fabs(v[n * D + j] * ghin[t * D + j]);
      const double s = std::fabs(h_pre[t * N + n]) + eps;
      m_gz[n] = g_pre * s * (1 + s);
      overflow = overflow || s * (1 + s) > kFp32Max;
      if (d.head) continue;  // no post branch
      const double hp = std::fabs(h_post[t * N + n]);
      const double post_factor = hp * (1 + hp / 2);
      m_gz[N + n] = std::fabs(ghpost[t * N + n]) * post_factor;
      overflow = overflow || post_factor > kFp32Max;
    }
    for (int64_t i = 0; i < R; ++i) m_gz[2 * N + i] = std::fabs(ghres[t * R + i]);
    double m_gr = 0;
    for (int64_t f = 0; f < F; ++f) {
      const int group = f < N ? 0 : f < 2 * N ? 1 : 2;
      const double gw = std::fabs(alpha[group]) * m_gz[f];
      m_G[f] = r * gw;
      m_gr += gw * std::fabs(h_mix[t * F + f]);
      m_bias[f] += m_gz[f];
      m_alpha[group] += m_gz[f] * r * std::fabs(h_mix[t * F + f]);
    }
    const double m_c = r * r * r * m_gr / double(K);
    for (int64_t k = 0; k < K; ++k) {
      double gu = 0;
      for (int64_t f = 0; f < F; ++f) gu += std::fabs(phi[f * K + k]) * m_G[f];
      m_gu[k] = gu;
    }
    overflow = overflow || m_gr > kFp32Max || m_c > kFp32Max;
    for (int64_t f = 0; f < F; ++f) overflow = overflow || m_gz[f] > kFp32Max || m_G[f] > kFp32Max;
    for (int64_t k = 0; k < K; ++k) overflow = overflow || m_gu[k] > kFp32Max;
    any_overflow = any_overflow || overflow;
    const double slack = overflow ? kUnbounded : 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < D; ++j) {
        const int64_t k = n * D + j;
        const double mag = std::fabs(h_pre[t * N + n] * ghin[t * D + j]) + std::fabs(gamma[k]) * m_gu[k] +
                           m_c * std::fabs(v[k]) + (gxp.empty() ? 0.0 : std::fabs(gxp[t * K + k]));
        check("grad_x", p.grad_x, p.grad_x.at(t, n, j), kRel * mag + slack, p.grad_x.dtype,
              " token " + std::to_string(t) + " n " + std::to_string(n) + " d " + std::to_string(j));
        m_gamma[k] += std::fabs(v[k]) * m_gu[k];
        for (int64_t f = 0; f < F; ++f) m_phi[f * K + k] += m_G[f] * std::fabs(v[k] * gamma[k]);
      }
  }
  if (any_overflow) {  // the sums over tokens too
    std::fill(m_phi.begin(), m_phi.end(), kUnbounded);
    std::fill(m_gamma.begin(), m_gamma.end(), kUnbounded);
    std::fill(m_bias.begin(), m_bias.end(), kUnbounded);
    std::fill(m_alpha.begin(), m_alpha.end(), kUnbounded);
  }
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t k = 0; k < K; ++k)
      check("grad_phi", p.grad_phi, p.grad_phi.at(f, k), kRel * m_phi[f * K + k], mhc::DType::fp32,
            " [" + std::to_string(f) + "," + std::to_string(k) + "]");
    check("grad_bias", p.grad_bias, p.grad_bias.at(0, f), kRel * m_bias[f], mhc::DType::fp32, " [" + std::to_string(f) + "]");
  }
  for (int a = 0; a < A; ++a)
    check("grad_alpha", p.grad_alpha, p.grad_alpha.at(0, a), kRel * m_alpha[a], mhc::DType::fp32, " [" + std::to_string(a) + "]");
  if (p.grad_gamma.present())
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < D; ++j)
        check("grad_gamma", p.grad_gamma, p.grad_gamma.at(n, j), kRel * m_gamma[n * D + j], mhc::DType::fp32,
              " [" + std::to_string(n) + "," + std::to_string(j) + "]");

  if (rerun) {
    std::vector<uint8_t> shifted(arena.bytes + 64 + 48);
    uint8_t* sb = shifted.data() + 16;
    while ((reinterpret_cast<uintptr_t>(sb) - reinterpret_cast<uintptr_t>(arena.base)) % 64 == 0) sb += 16;
    std::memcpy(sb, arena.pristine.data(), arena.bytes);
    BackwardCall again = backward_call(c, sb);
    again.options.num_threads = c.problem.threads == 1 ? 3 : 1;
    again.options.matmul_precision = how.precision;
    mhc::core::BackwardProblem again_problem;  // through the operator layer: the face's rules
    mhc::Status s2 = mhc::ops::pre::backward::validate(again.in, again.out, again.options, &again_problem,
                                                      {.eps_values = how.eps_values});
    if (s2.ok()) s2 = mhc::ops::pre::backward::run_in_thread_workspace(again_problem, again.options.num_threads);
    if (!s2.ok()) fail("backward rerun failed: " + s2.message());
    for (size_t i = 0; i < arena.bytes; ++i)
      if (sb[i] != arena.base[i])
        fail("backward: a rerun with num_threads=" + std::to_string(again.options.num_threads) +
             " at another address differs at arena byte " + std::to_string(i));
  }
}

// ------------------------------------------------------------------ the C++ / C face targets

namespace {

mhc_tensor c_tensor(const mhc::TensorView& v) {
  mhc_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);
  t.rank = v.rank;
  for (int i = 0; i < MHC_MAX_RANK; ++i) {
    t.shape[i] = v.shape[i];
    t.strides[i] = v.strides[i];
  }
  return t;
}

struct CArgs {
  std::vector<mhc_tensor> storage;
  std::vector<const mhc_tensor*> ptrs;
  explicit CArgs(size_t n) : storage(n), ptrs(n, nullptr) {}
  void set(size_t i, const Tensor& t, uint8_t* base) {
    if (!t.present) return;  // NULL
    storage[i] = c_tensor(view_of(t, base));
    ptrs[i] = &storage[i];
  }
};

bool all_inside(Case& c, const Arena& arena) {
  for (const Tensor& t : c.tensors) {
    if (!t.present || t.null_data || t.rank < 0 || t.rank > MHC_MAX_RANK) continue;
    if (element_size_of(t.dtype) == 0) continue;
    if (!view_inside(arena.base, arena.bytes, arena.base + t.byte_offset, t.dtype, t.rank, t.shape, t.strides))
      return false;
  }
  return true;
}

// The C face, each argument by its name in the description (NULL where the case has none).
int call_c(Case& c, uint8_t* base, const mhc_options& options, bool* required_null) {
  CArgs a(c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) a.set(i, c.tensors[i], base);
  auto at = [&](const char* name) {
    for (size_t i = 0; i < c.tensors.size(); ++i)
      if (std::strcmp(c.tensors[i].name, name) == 0) return static_cast<const mhc_tensor*>(a.ptrs[i]);
    return static_cast<const mhc_tensor*>(nullptr);
  };
  auto no_scalar = [](const char*) { return 0; };
  return mhc_test::call_described(c.problem.op == Op::forward ? "pre_forward" : "pre_backward", at, no_scalar,
                                  no_scalar, &options, required_null);
}

}  // namespace

void run_cpp_target(const uint8_t* data, size_t size, Op op) {
  Bytes in(data, size);
  Case c = generate(in, op, false);
  describe(c);
  const Face face = in.chance(64) ? Face::c : Face::cpp;
  const bool rerun = !in.chance(96);
  Arena arena(c);

  mhc::Status validated;
  mhc::core::ForwardProblem fp;
  mhc::core::BackwardProblem bp;
  ForwardCall fcall;
  BackwardCall bcall;
  if (op == Op::forward) {
    fcall = forward_call(c, arena.base);
    validated = mhc::ops::pre::forward::validate(fcall.in, fcall.out, fcall.options, &fp);
  } else {
    bcall = backward_call(c, arena.base);
    validated = mhc::ops::pre::backward::validate(bcall.in, bcall.out, bcall.options, &bp);
  }
  MHC_FUZZ_CHECK(arena.unchanged(), "validation wrote to the arena");
  if (!validated.ok()) {
    MHC_FUZZ_CHECK(!validated.message().empty(), "a rejection without a message");
    MHC_FUZZ_CHECK(validated.code() == mhc::StatusCode::null_pointer ||
                       validated.code() == mhc::StatusCode::invalid_argument,
                   "validation returned an unexpected code: " + validated.message());
  }
  if (validated.ok() && !all_inside(c, arena)) {
    // A pointer carries no size: the C++ face cannot see that these views leave
    // the arena, so the call is not made. Sizing it must still be safe.
    if (op == Op::forward) (void)mhc::ops::pre::forward::workspace_bytes(fp, c.problem.threads);
    else (void)mhc::ops::pre::backward::workspace_bytes(bp, c.problem.threads);
    return;
  }

  if (face == Face::c) {
    mhc_options options = mhc_default_options();
    options.norm_eps = c.problem.norm_eps;
    options.hc_eps = c.problem.hc_eps;
    options.num_threads = c.problem.threads;
    bool required_null = false;
    const int code = call_c(c, arena.base, options, &required_null);
    if (required_null) {
      MHC_FUZZ_CHECK(code == MHC_ERR_NULLPTR, "C face: a NULL required tensor was not reported");
      MHC_FUZZ_CHECK(std::string(mhc_last_error()).find("required, got NULL") != std::string::npos,
                     std::string("C face message: ") + mhc_last_error());
      MHC_FUZZ_CHECK(arena.unchanged(), "C face: a NULL-argument error wrote to the arena");
      return;
    }
    if (!validated.ok()) {
      MHC_FUZZ_CHECK(code == int(validated.code()), "C face code differs from validation's");
      MHC_FUZZ_CHECK(mhc_last_error() == validated.message(), "C face message differs from validation's");
      MHC_FUZZ_CHECK(mhc_last_error_kind() == int(validated.kind()), "C face kind differs from validation's");
      MHC_FUZZ_CHECK(arena.unchanged(), "C face: a rejected call wrote to the arena");
      return;
    }
    if (code != MHC_OK) fail(std::string("C face: a validated call failed: ") + mhc_last_error());
  } else {
    const mhc::Status s = op == Op::forward ? mhc::pre_forward(fcall.in, fcall.out, fcall.options)
                                            : mhc::pre_backward(bcall.in, bcall.out, bcall.options);
    if (!validated.ok()) {
      MHC_FUZZ_CHECK(s.code() == validated.code() && s.kind() == validated.kind() &&
                         s.message() == validated.message(),
                     "C++ face status differs from validation's: " + s.message() + " / " + validated.message());
      MHC_FUZZ_CHECK(arena.unchanged(), "C++ face: a rejected call wrote to the arena");
      return;
    }
    if (!s.ok()) fail("C++ face: a validated call failed: " + s.message());
  }
  if (op == Op::forward) check_accepted_forward(c, arena, rerun);
  else check_accepted_backward(c, arena, rerun);
}

}  // namespace mhc_fuzz
