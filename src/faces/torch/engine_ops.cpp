// The inference engines' ops (SPEC §16) registered with torch's dispatcher from C++:
// torch.ops.mhc_engines.* always, and on request the same kernels under SGLang's names
// (torch.ops.sgl_kernel.hc_*_fused_cpu). A thin face over the C++ API: it reads the
// tensors as views, allocates the outputs with torch and reports mhc's errors as
// torch's ValueError / TypeError. What each op computes is the Python face's
// (python/mhc/engines), which the tests hold it to bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "faces/torch/output_cache.hpp"
#include "mhc/mhc.hpp"

namespace mhc::torch_face {
namespace {

using at::Tensor;

DType dtype_of(const Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return DType::bf16;
    case at::kHalf: return DType::fp16;
    case at::kFloat: return DType::fp32;
    default: break;
  }
  TORCH_CHECK_TYPE(false, name, ": expected dtype bf16, fp16 or fp32, got ", t.scalar_type());
}

TensorView view_of(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": expected a CPU tensor, got device ", t.device());
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, name, ": expected a dense (strided) tensor");
  TORCH_CHECK_VALUE(t.dim() <= kMaxRank, name, ": rank ", t.dim(), " exceeds the maximum ", kMaxRank);
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = dtype_of(t, name);
  v.rank = int32_t(t.dim());
  for (int i = 0; i < v.rank; ++i) v.shape[i] = t.size(i), v.strides[i] = t.stride(i);
  return v;
}

std::optional<TensorView> view_of(const c10::optional<Tensor>& t, const char* name) {
  if (!t.has_value()) return std::nullopt;
  return view_of(*t, name);
}

void raise_on_error(const Status& s) {
  if (s.ok()) return;
  TORCH_CHECK_TYPE(s.kind() != ErrorKind::dtype, s.message());
  TORCH_CHECK_VALUE(false, s.message());
}

// mhc's parallel work on torch's intra-op threads (the engine's OpenMP team), not on
// mhc's own pool beside them: engine_decode.py's interleaved decode loop.
void run_on_torch_threads(void*, int workers, void (*share)(void*, int), void* context) {
  at::parallel_for(0, workers, 1, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) share(context, int(w));
  });
}
const Executor kTorchThreads{&run_on_torch_threads, nullptr};

// For the duration of one op: this thread's mhc calls on torch's threads.
class OnTorchThreads {
 public:
  OnTorchThreads() : previous_(set_thread_executor(&kTorchThreads)) {}
  ~OnTorchThreads() { set_thread_executor(previous_); }
  OnTorchThreads(const OnTorchThreads&) = delete;
  OnTorchThreads& operator=(const OnTorchThreads&) = delete;

 private:
  const Executor* previous_;
};

// Engines call from their own threads: mhc runs on at most torch's intra-op count.
Options options(double norm_eps = 1e-6, double hc_eps = 1e-6) {
  Options o;
  o.norm_eps = norm_eps;
  o.hc_eps = hc_eps;
  o.num_threads = at::get_num_threads();
  return o;
}

// [..., *inner] as [T, *inner] (a view where strides allow), with the leading dims.
std::pair<Tensor, std::vector<int64_t>> tokens(const Tensor& t, int inner, const char* name) {
  TORCH_CHECK_VALUE(t.dim() >= inner, name, ": expected at least ", inner, " dims, got shape ", t.sizes());
  std::vector<int64_t> lead(t.sizes().begin(), t.sizes().end() - inner);
  if (t.dim() == inner + 1) return {t, lead};  // already [T, *inner]
  std::vector<int64_t> flat{-1};
  flat.insert(flat.end(), t.sizes().end() - inner, t.sizes().end());
  return {t.reshape(flat), lead};
}

std::vector<int64_t> shape(std::vector<int64_t> lead, std::initializer_list<int64_t> inner) {
  lead.insert(lead.end(), inner.begin(), inner.end());
  return lead;
}

// fp32 outputs on x's device (meta tensors: shapes only, mhc not called).
at::TensorOptions fp32(const Tensor& like) { return like.options().dtype(at::kFloat); }
bool shapes_only(const Tensor& t) { return t.is_meta(); }

// post [..., N, 1] (vLLM's) or [..., N] as [T, N].
Tensor post_rows(const Tensor& post, int64_t streams_dims) {
  const Tensor p = post.dim() == streams_dims && post.size(-1) == 1 ? post.squeeze(-1) : post;
  return tokens(p, 1, "post").first;
}

// h_post = mult·σ(z_post) from mhc's 2·σ(z_post): (2σ)·(mult/2) rounds once to mult·σ.
void scale_post(Tensor& h_post, double mult) {
  if (mult != 2.0 && !shapes_only(h_post)) h_post.mul_(mult / 2.0);
}

Tensor layer_input(const Tensor& h_in, const c10::optional<Tensor>& norm_weight, double norm_eps) {
  if (!norm_weight.has_value()) return h_in;
  Tensor y = empty_output(h_in.sizes(), h_in.options());
  if (!shapes_only(h_in))
    raise_on_error(rms_norm_forward({view_of(h_in, "h_in"), view_of(*norm_weight, "norm_weight"), norm_eps},
                                  {view_of(y, "y")}, options()));
  return y;
}

// ------------------------------------------------------------------ SGLang's three

std::tuple<Tensor, Tensor, Tensor> hc_pre_fused_cpu(const Tensor& x, const Tensor& hc_fn, const Tensor& hc_scale,
                                                    const Tensor& hc_base, int64_t hc_mult, int64_t sinkhorn_iters,
                                                    double rms_eps, double hc_eps) {
  const OnTorchThreads on_torch_threads;
  auto [flat, lead] = tokens(x, 2, "x");
  const int64_t T = flat.size(0), N = flat.size(1), D = flat.size(2);
  TORCH_CHECK_VALUE(hc_mult == N, "hc_mult: expected x's N = ", N, ", got ", hc_mult);
  Tensor y = empty_output({T, D}, flat.options()), post = empty_output({T, N}, fp32(flat)), comb = empty_output({T, N, N}, fp32(flat));
  if (!shapes_only(flat))
    raise_on_error(pre_sinkhorn_forward({view_of(flat, "x"), view_of(hc_fn, "hc_fn"), view_of(hc_scale, "hc_scale"),
                                       view_of(hc_base, "hc_base"), sinkhorn_iters},
                                      {view_of(y, "y"), view_of(post, "post"), view_of(comb, "comb")},
                                      options(rms_eps, hc_eps)));
  return {y.view(shape(lead, {D})), post.view(shape(lead, {N})), comb.view(shape(lead, {N, N}))};
}

Tensor hc_post_fused_cpu(const Tensor& x, const Tensor& residual, const Tensor& post, const Tensor& comb) {
  const OnTorchThreads on_torch_threads;
  auto [flat, lead] = tokens(residual, 2, "residual");
  Tensor out = empty_output(flat.sizes(), flat.options());
  if (!shapes_only(flat))
    raise_on_error(post_forward({view_of(flat, "residual"), view_of(tokens(comb, 2, "comb").first, "comb"),
                               view_of(tokens(x, 1, "x").first, "x"), view_of(post_rows(post, residual.dim()), "post")},
                              {view_of(out, "out")}, options()));
  return out.view(residual.sizes());
}

Tensor hc_head_fused_cpu(const Tensor& x, const Tensor& hc_fn, const Tensor& hc_scale, const Tensor& hc_base,
                         double hc_eps, double norm_eps) {
  const OnTorchThreads on_torch_threads;
  auto [flat, lead] = tokens(x, 2, "x");
  const int64_t T = flat.size(0), D = flat.size(2);
  Tensor h = empty_output({T, D}, flat.options());
  if (!shapes_only(flat))
    raise_on_error(pre_forward({view_of(flat, "x"), view_of(hc_fn, "hc_fn"), view_of(hc_scale.reshape({1}), "hc_scale"),
                              view_of(hc_base, "hc_base"), std::nullopt},
                             {view_of(h, "h"), std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
                             options(norm_eps, hc_eps)));
  return h.view(shape(lead, {D}));
}

// ------------------------------------------------------------------ vLLM's

// One site's pre on [T, N, D] streams: V4 (the site's own h_pre; the fused pair when one
// eps serves the gate and the Sinkhorn, else MhcPre then MhcSinkhorn: the same bits) or
// V4.1 (single_pass: the carried pre_mix). Returns (h_in, h_post, comb, h_pre).
std::tuple<Tensor, Tensor, Tensor, Tensor> site_pre(const Tensor& flat, const Tensor& fn, const Tensor& hc_scale,
                                                    const Tensor& hc_base, double rms_eps, double hc_pre_eps,
                                                    double hc_sinkhorn_eps, int64_t repeat, bool single_pass,
                                                    const c10::optional<Tensor>& pre_mix) {
  const int64_t T = flat.size(0), N = flat.size(1), D = flat.size(2), F = fn.size(0);
  Tensor h_in = empty_output({T, D}, flat.options()), h_post = empty_output({T, N}, fp32(flat));
  Tensor comb = empty_output({T, N, N}, fp32(flat)), h_pre = empty_output({T, N}, fp32(flat));
  if (shapes_only(flat)) return {h_in, h_post, comb, h_pre};
  const TensorView x = view_of(flat, "residual"), phi = view_of(fn, "fn"), alpha = view_of(hc_scale, "hc_scale"),
                   bias = view_of(hc_base, "hc_base");
  const Options o = options(rms_eps, hc_pre_eps);
  if (single_pass) {
    Tensor inv_rms = empty_output({T}, fp32(flat)), h_mix = empty_output({T, F}, fp32(flat));
    std::optional<TensorView> carried;
    if (pre_mix.has_value()) carried = view_of(tokens(*pre_mix, 1, "pre_mix").first, "pre_mix");
    raise_on_error(pre_single_pass_forward(
        {x, phi, alpha, bias, std::nullopt, carried, hc_sinkhorn_eps, repeat},
        {view_of(h_in, "h_in"), view_of(h_pre, "h_pre"), view_of(h_post, "post"), view_of(comb, "comb"),
         view_of(inv_rms, "inv_rms"), view_of(h_mix, "h_mix")},
        o));
  } else if (hc_pre_eps == hc_sinkhorn_eps) {
    raise_on_error(pre_sinkhorn_forward({x, phi, alpha, bias, repeat},
                                        {view_of(h_in, "h_in"), view_of(h_post, "post"), view_of(comb, "comb")}, o));
  } else {
    Tensor z = empty_output({T, N, N}, fp32(flat));
    raise_on_error(pre_forward({x, phi, alpha, bias, std::nullopt},
                               {view_of(h_in, "h_in"), view_of(h_post, "post"), view_of(z, "z"), std::nullopt,
                                std::nullopt, std::nullopt},
                               o));
    raise_on_error(sinkhorn_forward({view_of(z, "z"), hc_sinkhorn_eps, repeat}, {view_of(comb, "comb")}, o));
  }
  return {h_in, h_post, comb, h_pre};
}

// (post [..., N, 1], comb [..., N, N], layer_input [..., D], next_pre [..., N] or empty)
std::tuple<Tensor, Tensor, Tensor, Tensor> mhc_pre(const Tensor& residual, const Tensor& fn, const Tensor& hc_scale,
                                                   const Tensor& hc_base, double rms_eps, double hc_pre_eps,
                                                   double hc_sinkhorn_eps, double hc_post_mult_value,
                                                   int64_t sinkhorn_repeat, const c10::optional<Tensor>& norm_weight,
                                                   double norm_eps, bool single_pass,
                                                   const c10::optional<Tensor>& pre_mix) {
  const OnTorchThreads on_torch_threads;
  auto [flat, lead] = tokens(residual, 2, "residual");
  const int64_t N = flat.size(1), D = flat.size(2);
  auto [h_in, h_post, comb, h_pre] = site_pre(flat, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                              sinkhorn_repeat, single_pass, pre_mix);
  scale_post(h_post, hc_post_mult_value);
  Tensor next_pre = single_pass ? h_pre.view(shape(lead, {N})) : empty_output({0}, fp32(flat));
  return {h_post.view(shape(lead, {N, 1})), comb.view(shape(lead, {N, N})),
          layer_input(h_in, norm_weight, norm_eps).view(shape(lead, {D})), next_pre};
}

// MhcPost then the next V4 pre, one pass over the streams (MhcPostPre).
std::tuple<Tensor, Tensor, Tensor, Tensor> mhc_fused_post_pre(
    const Tensor& x, const Tensor& residual, const Tensor& post_layer_mix, const Tensor& comb_res_mix,
    const Tensor& fn, const Tensor& hc_scale, const Tensor& hc_base, double rms_eps, double hc_pre_eps,
    double hc_sinkhorn_eps, double hc_post_mult_value, int64_t sinkhorn_repeat,
    const c10::optional<Tensor>& norm_weight, double norm_eps) {
  const OnTorchThreads on_torch_threads;
  auto [flat, lead] = tokens(residual, 2, "residual");
  const int64_t T = flat.size(0), N = flat.size(1), D = flat.size(2), F = fn.size(0);
  Tensor x_next = empty_output(flat.sizes(), flat.options()), h_in = empty_output({T, D}, flat.options());
  Tensor h_pre = empty_output({T, N}, fp32(flat)), h_post = empty_output({T, N}, fp32(flat)), comb = empty_output({T, N, N}, fp32(flat));
  Tensor inv_rms = empty_output({T}, fp32(flat)), h_mix = empty_output({T, F}, fp32(flat));
  if (shapes_only(flat))
    return {x_next.view(residual.sizes()), h_post.view(shape(lead, {N, 1})), comb.view(shape(lead, {N, N})),
            h_in.view(shape(lead, {D}))};
  PostPreForwardInputs in{view_of(flat, "residual"),
                          view_of(tokens(comb_res_mix, 2, "comb_res_mix").first, "comb_res_mix"),
                          view_of(tokens(x, 1, "x").first, "x"),
                          view_of(post_rows(post_layer_mix, residual.dim()), "post_layer_mix"),
                          view_of(fn, "fn"),
                          view_of(hc_scale, "hc_scale"),
                          view_of(hc_base, "hc_base"),
                          std::nullopt,
                          std::nullopt,
                          0,
                          hc_sinkhorn_eps,
                          sinkhorn_repeat};
  raise_on_error(post_pre_forward(in,
                                  {view_of(x_next, "residual_cur"), view_of(h_in, "h_in"), view_of(h_pre, "h_pre"),
                                   view_of(h_post, "post_cur"), view_of(comb, "comb_cur"),
                                   view_of(inv_rms, "inv_rms"), view_of(h_mix, "h_mix")},
                                  options(rms_eps, hc_pre_eps)));
  scale_post(h_post, hc_post_mult_value);
  return {x_next.view(residual.sizes()), h_post.view(shape(lead, {N, 1})), comb.view(shape(lead, {N, N})),
          layer_input(h_in, norm_weight, norm_eps).view(shape(lead, {D}))};
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const OnTorchThreads on_torch_threads;
  auto [flat, lead] = tokens(x, 1, "x");
  Tensor y = empty_output(flat.sizes(), flat.options());
  if (!shapes_only(flat))
    raise_on_error(rms_norm_forward({view_of(flat, "x"), view_of(weight, "weight"), eps}, {view_of(y, "y")}, options()));
  return y.view(x.sizes());
}

// ------------------------------------------------------------------ SGLang's names on request

constexpr const char* kSglPre =
    "hc_pre_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, int hc_mult, int sinkhorn_iters, "
    "float rms_eps, float hc_eps) -> (Tensor, Tensor, Tensor)";
constexpr const char* kSglPost = "hc_post_fused_cpu(Tensor x, Tensor residual, Tensor post, Tensor comb) -> Tensor";
constexpr const char* kSglHead =
    "hc_head_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, float hc_eps, float norm_eps) "
    "-> Tensor";

// Defines an op with `fn` for every backend (CPU, and Meta for shapes) and as its
// autograd kernel too: inference ops, no graph (torch 1.13 has no autograd fallthrough
// for meta tensors).
template <class Fn>
void define(torch::Library& library, const char* schema, const char* name, Fn fn) {
  library.def(schema);
  library.impl(name, torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, fn));
  library.impl(name, torch::dispatch(c10::DispatchKey::Autograd, fn));
}

bool defined(const char* name) {
  return c10::Dispatcher::singleton().findSchema({std::string("sgl_kernel::") + name, ""}).has_value();
}

// Defines torch.ops.sgl_kernel.hc_*_fused_cpu on these kernels unless the namespace holds
// any of them (a real sgl-kernel build): true when it defined them.
bool register_sgl_kernel() {
  static std::unique_ptr<torch::Library> library;  // owns the registrations for the process
  if (library || defined("hc_pre_fused_cpu") || defined("hc_post_fused_cpu") || defined("hc_head_fused_cpu"))
    return false;
  library = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "sgl_kernel", c10::nullopt, __FILE__,
                                             __LINE__);
  define(*library, kSglPre, "hc_pre_fused_cpu", TORCH_FN(hc_pre_fused_cpu));
  define(*library, kSglPost, "hc_post_fused_cpu", TORCH_FN(hc_post_fused_cpu));
  define(*library, kSglHead, "hc_head_fused_cpu", TORCH_FN(hc_head_fused_cpu));
  return true;
}

}  // namespace

TORCH_LIBRARY(mhc_engines, m) {
  define(m, kSglPre, "hc_pre_fused_cpu", TORCH_FN(hc_pre_fused_cpu));
  define(m, kSglPost, "hc_post_fused_cpu", TORCH_FN(hc_post_fused_cpu));
  define(m, kSglHead, "hc_head_fused_cpu", TORCH_FN(hc_head_fused_cpu));
  define(m,
         "mhc_pre(Tensor residual, Tensor fn, Tensor hc_scale, Tensor hc_base, float rms_eps, float hc_pre_eps, "
         "float hc_sinkhorn_eps, float hc_post_mult_value, int sinkhorn_repeat, Tensor? norm_weight, "
         "float norm_eps, bool single_pass, Tensor? pre_mix) -> (Tensor, Tensor, Tensor, Tensor)",
         "mhc_pre", TORCH_FN(mhc_pre));
  define(m,
         "mhc_fused_post_pre(Tensor x, Tensor residual, Tensor post_layer_mix, Tensor comb_res_mix, Tensor fn, "
         "Tensor hc_scale, Tensor hc_base, float rms_eps, float hc_pre_eps, float hc_sinkhorn_eps, "
         "float hc_post_mult_value, int sinkhorn_repeat, Tensor? norm_weight, float norm_eps) "
         "-> (Tensor, Tensor, Tensor, Tensor)",
         "mhc_fused_post_pre", TORCH_FN(mhc_fused_post_pre));
  define(m, "rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", "rms_norm", TORCH_FN(rms_norm));
  m.def("register_sgl_kernel() -> bool", TORCH_FN(register_sgl_kernel));
}

}  // namespace mhc::torch_face
