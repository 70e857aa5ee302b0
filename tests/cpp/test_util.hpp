// Shared helpers of the C++ tests: a deterministic RNG, host tensors of any
// dtype with arbitrary strides, the operands of one MhcPre / MhcPreBackward call
// (random, reproducible from a seed), their float64 upcasts for the reference,
// and error measures (ulps, normwise relative error).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "common/rng.hpp"
#include "kernels/reference/reference.hpp"
#include "kernels/registry.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"

namespace mhc_test {

// MHC_ISA naming a family this build or CPU cannot run makes every call fail
// (naming it): the binary's tests are then skipped, saying so.
struct RequestedFamilyEnvironment : ::testing::Environment {
  void SetUp() override {
    const char* want = std::getenv("MHC_ISA");
    if (want == nullptr || *want == '\0') return;
    mhc::Isa isa;
    if (mhc::isa_from_name(want, &isa) && mhc::isa_available(isa)) return;
    GTEST_SKIP() << "MHC_ISA=" << want << ": not a kernel family this build and CPU run";
  }
};
inline ::testing::Environment* const kRequestedFamilyEnvironment =
    ::testing::AddGlobalTestEnvironment(new RequestedFamilyEnvironment);

inline bool reference_selected() { return std::string(mhc::isa()) == "reference"; }

// Every family this build and CPU run, best first.
inline std::vector<mhc::Isa> available_families() { return mhc::available_isas(); }

// The families a suite that checks each family in turn runs: every one this CPU runs,
// or only the one MHC_ISA names (a slow emulated CPU asks for its own family alone:
// the others run the same instructions on another CPU, scripts/test_arm64.sh).
inline std::vector<mhc::Isa> families_under_test() {
  mhc::Isa named;
  if (const char* env = std::getenv("MHC_ISA"); env != nullptr && mhc::isa_from_name(env, &named)) return {named};
  return available_families();
}

using mhc::DType;
using mhc::TensorView;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------- random numbers


// ---------------------------------------------------------------- dtypes

inline int64_t element_bytes(DType t) { return mhc::core::element_size(t); }
inline const char* dtype_name(DType t) { return mhc::core::dtype_name(t); }

// Spacing of the dtype's representable numbers at magnitude |v| (the ulp of the
// binade |v| is in; the smallest subnormal spacing below the normal range).
inline double ulp_of(DType t, double v) {
  const int mantissa_bits = t == DType::fp32 ? 23 : t == DType::fp16 ? 10 : 7;
  const int min_exponent = t == DType::fp16 ? -14 : -126;
  const double a = std::fabs(v);
  int e = a > 0 && std::isfinite(a) ? std::ilogb(a) : min_exponent;
  if (e < min_exponent) e = min_exponent;
  return std::ldexp(1.0, e - mantissa_bits);
}

// ---------------------------------------------------------------- host tensors

// Storage of a tensor: 4-byte aligned words, filled with a byte pattern.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, int64_t elements, uint8_t fill)
      : dtype_(dtype), elements_(elements),
        words_(size_t((elements * element_bytes(dtype) + 3) / 4 + 1)) {
    std::memset(words_.data(), fill, words_.size() * 4);
  }
  DType dtype() const { return dtype_; }
  int64_t elements() const { return elements_; }
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words_.data()); }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(words_.data()); }
  size_t byte_size() const { return words_.size() * 4; }
  double get(int64_t i) const { return mhc::core::load_element(bytes(), dtype_, i); }
  void set(int64_t i, double v) { mhc::core::store_element(bytes(), dtype_, i, float(v)); }
  uint32_t bits(int64_t i) const {
    if (dtype_ == DType::fp32) { uint32_t u; std::memcpy(&u, bytes() + 4 * i, 4); return u; }
    uint16_t h; std::memcpy(&h, bytes() + 2 * i, 2); return h;
  }
  std::vector<uint8_t> snapshot() const { return {bytes(), bytes() + byte_size()}; }

 private:
  DType dtype_ = DType::fp32;
  int64_t elements_ = 0;
  std::vector<uint32_t> words_;
};

// A strided view into its own Buffer. An empty Tensor (present() false) stands
// for an absent optional tensor.
struct Tensor {
  Buffer buffer;
  Shape shape, strides;  // strides in elements
  int64_t offset = 0;    // element offset of the view's first element in the buffer
  bool exists = false;

  bool present() const { return exists; }
  int rank() const { return int(shape.size()); }
  int64_t numel() const {  // 0 for an absent tensor
    if (!exists) return 0;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  DType dtype() const { return buffer.dtype(); }
  // Storage index of the element at row-major position `linear`.
  int64_t index(int64_t linear) const {
    int64_t at = offset;
    for (int i = rank() - 1; i >= 0; --i) {
      at += (linear % shape[i]) * strides[i];
      linear /= shape[i];
    }
    return at;
  }
  double get(int64_t linear) const { return buffer.get(index(linear)); }
  void set(int64_t linear, double v) { buffer.set(index(linear), v); }
  uint32_t bits(int64_t linear) const { return buffer.bits(index(linear)); }
  std::vector<double> values() const {  // row-major, upcast to float64
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = get(i);
    return out;
  }
  std::vector<uint32_t> raw() const {  // row-major raw bits
    std::vector<uint32_t> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = bits(i);
    return out;
  }
  void* data() { return buffer.bytes() + offset * element_bytes(dtype()); }
  TensorView view() {
    TensorView v;
    v.data = data();
    v.dtype = dtype();
    v.rank = rank();
    for (int i = 0; i < rank(); ++i) { v.shape[i] = shape[i]; v.strides[i] = strides[i]; }
    return v;
  }
  std::optional<TensorView> optional_view() {
    return present() ? std::optional<TensorView>(view()) : std::nullopt;
  }
};

inline Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t stride = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) { s[i] = stride; stride *= shape[i]; }
  return s;
}

inline int64_t span_elements(const Shape& shape, const Shape& strides, int64_t offset) {
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return offset;
    last += (shape[i] - 1) * strides[i];
  }
  return last + 1;
}

inline Tensor make_tensor(DType dtype, Shape shape, uint8_t fill = 0) {
  Tensor t;
  t.exists = true;
  t.strides = contiguous_strides(shape);
  t.shape = std::move(shape);
  t.buffer = Buffer(dtype, t.numel(), fill);
  return t;
}

// Non-contiguous layouts of the same logical tensor.
enum class Layout {
  contiguous,
  every_other,  // contiguous strides doubled: one unused element after each
  padded_rows,  // innermost dim contiguous, every outer stride padded by a few elements
  permuted,     // dims stored in a random physical order, with padding and a leading offset
};
// A tensor of `shape` laid out as `layout`; the bytes outside the view keep `fill`.
inline Tensor make_laid_out(DType dtype, const Shape& shape, Layout layout, Rng& rng, uint8_t fill) {
  Tensor t;
  t.shape = shape;
  t.exists = true;
  const int rank = int(shape.size());
  std::vector<int> order(rank);  // physical order, outermost first
  for (int i = 0; i < rank; ++i) order[i] = i;
  int64_t inner_step = 1, pad = 0;
  switch (layout) {
    case Layout::contiguous: break;
    case Layout::every_other: inner_step = 2; break;
    case Layout::padded_rows: pad = 1 + rng.below(5); break;
    case Layout::permuted:
      for (int i = rank - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
      pad = rng.below(3);
      t.offset = 1 + rng.below(7);
      break;
  }
  t.strides.assign(rank, 0);
  int64_t stride = inner_step;
  for (int i = rank - 1; i >= 0; --i) {
    t.strides[order[i]] = stride;
    stride = stride * shape[order[i]] + (layout == Layout::every_other ? 0 : pad);
  }
  t.buffer = Buffer(dtype, span_elements(shape, t.strides, t.offset) + 3, fill);
  return t;
}

// The same values as `src`, in another layout (bytes outside the view keep `fill`).
inline Tensor relaid(const Tensor& src, Layout layout, Rng& rng, uint8_t fill = 0x5a) {
  if (!src.present()) return {};
  Tensor t = make_laid_out(src.dtype(), src.shape, layout, rng, fill);
  for (int64_t i = 0; i < src.numel(); ++i) {
    const int64_t from = src.index(i), to = t.index(i);
    std::memcpy(t.buffer.bytes() + to * element_bytes(t.dtype()),
                src.buffer.bytes() + from * element_bytes(src.dtype()), size_t(element_bytes(t.dtype())));
  }
  return t;
}

// Every byte of the buffer that no element of the view covers still equals `fill`.
inline ::testing::AssertionResult gaps_untouched(const Tensor& t, uint8_t fill) {
  std::vector<bool> covered(t.buffer.byte_size(), false);
  const int64_t esize = element_bytes(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i)
    for (int64_t b = 0; b < esize; ++b) covered[size_t(t.index(i) * esize + b)] = true;
  for (size_t b = 0; b < covered.size(); ++b)
    if (!covered[b] && t.buffer.bytes()[b] != fill)
      return ::testing::AssertionFailure()
             << "byte " << b << " outside the view changed to 0x" << std::hex << int(t.buffer.bytes()[b]);
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- operands of one call

// Residual branch: R = N*N, R = N!, or none (two-entry alpha, F = 2N); the head
// (one-entry alpha, F = N) has neither a residual nor a post branch.
enum class FForm { square, permutation, two_entry, head };
inline const char* fform_name(FForm f) {
  return f == FForm::square ? "square" : f == FForm::permutation ? "perm" : f == FForm::two_entry ? "two_entry" : "head";
}
inline int64_t alpha_entries(FForm form) { return form == FForm::head ? 1 : form == FForm::two_entry ? 2 : 3; }
inline int64_t residual_count(FForm form, int64_t N) {
  if (form == FForm::two_entry || form == FForm::head) return 0;
  if (form == FForm::square) return N * N;
  int64_t f = 1;
  for (int64_t i = 2; i <= N; ++i) f *= i;
  return f;
}

struct Config {
  int64_t N = 4, D = 8;
  int64_t B = 1, S = 4;  // T = B*S
  bool bsnd = false;     // x as [B,S,N,D]; else [T,N,D]
  DType dtype = DType::bf16;
  FForm form = FForm::square;
  bool gamma = true;
  bool grad_x_post = false;
  bool grad_x_post_fp32 = false;  // grad_x_post in fp32 whatever x's dtype (MhcPostBackward's fp32 grad_x)
  bool caches = true;          // forward produces inv_rms, h_mix, h_pre
  bool flat_residual = false;  // h_res / grad_h_res as [.., R] even when R = N*N
  double norm_eps = 1e-6, hc_eps = 1e-6;
  uint64_t seed = 1;

  int64_t T() const { return B * S; }
  int64_t K() const { return N * D; }
  int64_t R() const { return residual_count(form, N); }
  int64_t F() const { return form == FForm::head ? N : 2 * N + R(); }
  mhc::kernels::PreShape dims() const {
    mhc::kernels::PreShape d;
    d.T = T(); d.N = N; d.D = D; d.K = K(); d.R = R(); d.F = F();
    d.two_entry_alpha = form == FForm::two_entry;
    d.head = form == FForm::head;
    return d;
  }
  // A per-token shape in x's layout: [B,S,inner...] or [T,inner...].
  Shape token_shape(std::initializer_list<int64_t> inner) const {
    Shape s = bsnd ? Shape{B, S} : Shape{T()};
    s.insert(s.end(), inner.begin(), inner.end());
    return s;
  }
  Shape residual_shape() const {
    return R() == N * N && !flat_residual ? token_shape({N, N}) : token_shape({R()});
  }
  std::string name() const;
};
// gtest prints parameters with this (not as raw bytes).
inline void PrintTo(const Config& c, std::ostream* os);

inline std::string Config::name() const {
  std::string s = "N" + std::to_string(N) + "_D" + std::to_string(D) + "_" +
                  (bsnd ? "B" + std::to_string(B) + "S" + std::to_string(S) : "T" + std::to_string(T())) +
                  "_" + dtype_name(dtype) + "_" + fform_name(form);
  if (gamma) s += "_gamma";
  if (grad_x_post) s += grad_x_post_fp32 ? "_gxpost32" : "_gxpost";
  if (!caches) s += "_nocache";
  if (flat_residual) s += "_flat";
  return s;
}

inline void PrintTo(const Config& c, std::ostream* os) { *os << c.name() << " seed " << c.seed; }

inline constexpr uint8_t kOutputFill = 0xa5;  // byte pattern of unwritten outputs

// Every tensor of one forward call and one backward call, contiguous.
struct Operands {
  Config cfg;
  // forward inputs
  Tensor x, phi, alpha, bias, gamma;
  // forward outputs (inv_rms, h_mix, h_pre, h_post are also backward inputs)
  Tensor h_in, h_post, h_res, inv_rms, h_mix, h_pre;
  // backward inputs
  Tensor grad_h_in, grad_h_post, grad_h_res, grad_x_post;
  // backward outputs
  Tensor grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma;
  mhc::Options options;
};

// Random, dtype-rounded inputs; outputs filled with kOutputFill. The forward
// outputs are allocated even without caches (the backward reads them).
inline Operands make_operands(const Config& c) {
  Operands o;
  o.cfg = c;
  o.options.norm_eps = c.norm_eps;
  o.options.hc_eps = c.hc_eps;
  Rng rng(c.seed * 0x2545f4914f6cdd1dull + 17);
  const int64_t N = c.N, D = c.D, K = c.K(), F = c.F();
  auto fill = [&](Tensor& t, auto draw) { for (int64_t i = 0; i < t.numel(); ++i) t.set(i, draw()); };
  o.x = make_tensor(c.dtype, c.token_shape({N, D}));
  fill(o.x, [&] { return rng.normal() * (0.5 + rng.uniform()); });
  o.phi = make_tensor(DType::fp32, {F, K});
  const double phi_scale = 1.0 / std::sqrt(double(K));
  fill(o.phi, [&] { return rng.uniform(-2, 2) * phi_scale; });
  o.alpha = make_tensor(DType::fp32, {alpha_entries(c.form)});
  fill(o.alpha, [&] { return rng.uniform(0.25, 1.5); });
  o.bias = make_tensor(DType::fp32, {F});
  fill(o.bias, [&] { return rng.uniform(-1, 1); });
  if (c.gamma) {
    o.gamma = make_tensor(DType::fp32, {N, D});
    fill(o.gamma, [&] { return rng.uniform(0.5, 1.5); });
  }
  o.h_in = make_tensor(c.dtype, c.token_shape({D}), kOutputFill);
  if (c.form != FForm::head) o.h_post = make_tensor(DType::fp32, c.token_shape({N}), kOutputFill);
  if (alpha_entries(c.form) == 3) o.h_res = make_tensor(DType::fp32, c.residual_shape(), kOutputFill);
  o.inv_rms = make_tensor(DType::fp32, c.token_shape({}), kOutputFill);
  o.h_mix = make_tensor(DType::fp32, c.token_shape({F}), kOutputFill);
  o.h_pre = make_tensor(DType::fp32, c.token_shape({N}), kOutputFill);

  o.grad_h_in = make_tensor(c.dtype, c.token_shape({D}));
  fill(o.grad_h_in, [&] { return rng.normal(); });
  if (c.form != FForm::head) {
    o.grad_h_post = make_tensor(DType::fp32, c.token_shape({N}));
    fill(o.grad_h_post, [&] { return rng.normal(); });
  }
  if (alpha_entries(c.form) == 3) {
    o.grad_h_res = make_tensor(DType::fp32, c.residual_shape());
    fill(o.grad_h_res, [&] { return rng.normal(); });
  }
  if (c.grad_x_post) {
    o.grad_x_post = make_tensor(c.grad_x_post_fp32 ? DType::fp32 : c.dtype, c.token_shape({N, D}));
    fill(o.grad_x_post, [&] { return rng.normal(); });
  }
  o.grad_x = make_tensor(c.dtype, c.token_shape({N, D}), kOutputFill);
  o.grad_phi = make_tensor(DType::fp32, {F, K}, kOutputFill);
  o.grad_alpha = make_tensor(DType::fp32, {alpha_entries(c.form)}, kOutputFill);
  o.grad_bias = make_tensor(DType::fp32, {F}, kOutputFill);
  if (c.gamma) o.grad_gamma = make_tensor(DType::fp32, {N, D}, kOutputFill);
  return o;
}

inline mhc::PreForwardInputs forward_inputs(Operands& o) {
  return {o.x.view(), o.phi.view(), o.alpha.view(), o.bias.view(), o.gamma.optional_view()};
}
inline mhc::PreForwardOutputs forward_outputs(Operands& o) {
  mhc::PreForwardOutputs out{o.h_in.view(), o.h_post.optional_view(), o.h_res.optional_view(), {}, {}, {}};
  if (o.cfg.caches) {
    out.inv_rms = o.inv_rms.view();
    out.h_mix = o.h_mix.view();
    out.h_pre = o.h_pre.view();
  }
  return out;
}
inline mhc::PreBackwardInputs backward_inputs(Operands& o) {
  return {o.x.view(), o.phi.view(), o.alpha.view(), o.grad_h_in.view(), o.grad_h_post.optional_view(),
          o.grad_h_res.optional_view(), o.inv_rms.view(), o.h_mix.view(), o.h_pre.view(),
          o.h_post.optional_view(), o.gamma.optional_view(), o.grad_x_post.optional_view()};
}
inline mhc::PreBackwardOutputs backward_outputs(Operands& o) {
  return {o.grad_x.view(), o.grad_phi.view(), o.grad_alpha.view(), o.grad_bias.view(),
          o.grad_gamma.optional_view()};
}

// Forward with all three caches (whatever cfg.caches says), so the backward has them.
inline mhc::Status run_forward_with_caches(Operands& o) {
  mhc::PreForwardOutputs out = forward_outputs(o);
  out.inv_rms = o.inv_rms.view();
  out.h_mix = o.h_mix.view();
  out.h_pre = o.h_pre.view();
  return mhc::pre_forward(forward_inputs(o), out, o.options);
}

// ---------------------------------------------------------------- float64 upcasts

inline std::vector<double> values_or_empty(const Tensor& t) {
  return t.present() ? t.values() : std::vector<double>{};
}

inline mhc::kernels::reference::ForwardInputs64 forward64(const Operands& o) {
  mhc::kernels::reference::ForwardInputs64 in;
  in.dims = o.cfg.dims();
  in.x = o.x.values();
  in.phi = o.phi.values();
  in.alpha = o.alpha.values();
  in.bias = o.bias.values();
  in.gamma = values_or_empty(o.gamma);
  in.norm_eps = o.cfg.norm_eps;
  in.hc_eps = o.cfg.hc_eps;
  return in;
}

// The backward's inputs as the library read them, caches included (so the
// forward must have run).
inline mhc::kernels::reference::BackwardInputs64 backward64(const Operands& o) {
  mhc::kernels::reference::BackwardInputs64 in;
  in.dims = o.cfg.dims();
  in.x = o.x.values();
  in.phi = o.phi.values();
  in.alpha = o.alpha.values();
  in.gamma = values_or_empty(o.gamma);
  in.grad_h_in = o.grad_h_in.values();
  in.grad_h_post = values_or_empty(o.grad_h_post);
  in.grad_h_res = values_or_empty(o.grad_h_res);
  in.inv_rms = o.inv_rms.values();
  in.h_mix = o.h_mix.values();
  in.h_pre = o.h_pre.values();
  in.h_post = values_or_empty(o.h_post);
  in.grad_x_post = values_or_empty(o.grad_x_post);
  in.hc_eps = o.cfg.hc_eps;
  return in;
}

// ---------------------------------------------------------------- error measures

// ||got - want||_2 / ||want||_2 (0 when both are zero; inf when only want is).
inline double normwise_relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : INFINITY;
  return std::sqrt(diff / norm);
}

// Raw bytes of several buffers, to show that a failed call wrote nothing.
inline std::vector<std::vector<uint8_t>> snapshot_all(const std::vector<const Tensor*>& tensors) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor* t : tensors) out.push_back(t->buffer.snapshot());
  return out;
}

// Every tensor of Operands, with its name.
struct TensorMember {
  const char* name;
  Tensor Operands::*member;
};
inline const std::vector<TensorMember>& tensor_members() {
  static const std::vector<TensorMember> members = {
      {"x", &Operands::x}, {"phi", &Operands::phi}, {"alpha", &Operands::alpha},
      {"bias", &Operands::bias}, {"gamma", &Operands::gamma}, {"h_in", &Operands::h_in},
      {"h_post", &Operands::h_post}, {"h_res", &Operands::h_res}, {"inv_rms", &Operands::inv_rms},
      {"h_mix", &Operands::h_mix}, {"h_pre", &Operands::h_pre}, {"grad_h_in", &Operands::grad_h_in},
      {"grad_h_post", &Operands::grad_h_post}, {"grad_h_res", &Operands::grad_h_res},
      {"grad_x_post", &Operands::grad_x_post}, {"grad_x", &Operands::grad_x},
      {"grad_phi", &Operands::grad_phi}, {"grad_alpha", &Operands::grad_alpha},
      {"grad_bias", &Operands::grad_bias}, {"grad_gamma", &Operands::grad_gamma}};
  return members;
}

inline std::vector<const Tensor*> all_tensors(const Operands& o) {
  std::vector<const Tensor*> out;
  for (const TensorMember& m : tensor_members()) out.push_back(&(o.*m.member));
  return out;
}

}  // namespace mhc_test
