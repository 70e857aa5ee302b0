// The inference engines' ops (SPEC §16) registered with torch's dispatcher from C++:
// torch.ops.mhc_engines.* always, and on request the same kernels under SGLang's names
// (torch.ops.sgl_kernel.hc_*_fused_cpu). A thin face over the C++ API: it checks the
// arguments in the engine's words (arguments.hpp), allocates the outputs with torch,
// runs mhc on torch's intra-op threads and reports mhc's errors as torch's ValueError /
// TypeError. What each op computes is the Python face's (python/mhc/engines), which
// the tests hold it to bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "faces/torch/arguments.hpp"
#include "faces/torch/output_cache.hpp"
#include "faces/torch/prepared_cache.hpp"
#include "mhc/mhc.hpp"

namespace mhc::torch_face {
namespace {

using Shape = std::vector<int64_t>;

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

// The same options with the engine's weights prepared once (prepared_cache.hpp): the
// handle is kept in *held for the call's duration.
Options prepared(Options o, std::shared_ptr<const PreparedPre>* held, const Tensor& phi, const TensorView& phi_view,
                 const Tensor& alpha, const TensorView& alpha_view, const Tensor& bias, const TensorView& bias_view) {
  *held = prepared_weights(phi, phi_view, alpha, alpha_view, bias, bias_view);
  o.prepared = held->get();
  return o;
}

Shape with_lead(const Streams& s, std::initializer_list<int64_t> inner) {
  Shape shape = s.lead;
  shape.insert(shape.end(), inner);
  return shape;
}

// Outputs in the streams' dtype and fp32, on their device (meta: shapes only).
Tensor like_streams(const Streams& s, std::initializer_list<int64_t> shape) {
  return empty_output(shape, s.flat.options());
}
Tensor fp32(const Streams& s, std::initializer_list<int64_t> shape) {
  return empty_output(shape, s.flat.options().dtype(at::kFloat));
}

// The pre's weights: fn [2N + N², N·D], hc_scale [3], hc_base [2N + N²].
void check_pre_weights(const Streams& s, const Tensor& fn, const char* fn_name, const Tensor& scale,
                       const char* scale_name, const Tensor& base, const char* base_name) {
  const int64_t F = 2 * s.N + s.N * s.N;
  check_shape(fn, fn_name, {F, s.N * s.D});
  check_entries(scale, scale_name, 3);
  check_shape(base, base_name, {F});
}

// h_post = mult·σ(z_post) from mhc's 2·σ(z_post): (2σ)·(mult/2) rounds once to mult·σ.
void scale_post(Tensor& h_post, double mult) {
  if (mult != 2.0 && !h_post.is_meta()) h_post.mul_(mult / 2.0);
}

// The next sub-layer's RMSNorm of h_in (MhcRmsNorm), or h_in.
Tensor layer_input(const Tensor& h_in, const c10::optional<Tensor>& norm_weight, double norm_eps) {
  if (!norm_weight.has_value()) return h_in;
  Tensor y = empty_output(h_in.sizes(), h_in.options());
  if (!h_in.is_meta())
    raise_on_error(rms_norm_forward({view_of(h_in, "layer_input"), view_of(*norm_weight, "norm_weight"), norm_eps},
                                    {view_of(y, "layer_input")}, options()),
                   {{"weight", "norm_weight"}, {"eps", "norm_eps"}});
  return y;
}

// ------------------------------------------------------------------ SGLang's three

std::tuple<Tensor, Tensor, Tensor> hc_pre_fused_cpu(const Tensor& x, const Tensor& hc_fn, const Tensor& hc_scale,
                                                    const Tensor& hc_base, int64_t hc_mult, int64_t sinkhorn_iters,
                                                    double rms_eps, double hc_eps) {
  const OnTorchThreads on_torch_threads;
  const Streams s = streams(x, "x");
  TORCH_CHECK_VALUE(hc_mult == s.N, "hc_mult: expected x's N = ", s.N, ", got ", hc_mult);
  check_pre_weights(s, hc_fn, "hc_fn", hc_scale, "hc_scale", hc_base, "hc_base");
  check_eps("rms_eps", rms_eps);
  check_eps("hc_eps", hc_eps);
  check_devices(s.flat, "x", {{&hc_fn, "hc_fn"}, {&hc_scale, "hc_scale"}, {&hc_base, "hc_base"}});
  Tensor y = like_streams(s, {s.T, s.D}), post = fp32(s, {s.T, s.N}), comb = fp32(s, {s.T, s.N, s.N});
  if (!s.flat.is_meta()) {
    const PreSinkhornForwardInputs in{view_of(s.flat, "x"), view_of(hc_fn, "hc_fn"), view_of(hc_scale, "hc_scale"),
                                      view_of(hc_base, "hc_base"), sinkhorn_iters};
    std::shared_ptr<const PreparedPre> held;
    const Options o = prepared(options(rms_eps, hc_eps), &held, hc_fn, in.phi, hc_scale, in.alpha, hc_base, in.bias);
    raise_on_error(
        pre_sinkhorn_forward(in, {view_of(y, "y"), view_of(post, "post"), view_of(comb, "comb"), {}, {}, {}, {}, {}}, o),
        {{"phi", "hc_fn"}, {"alpha", "hc_scale"}, {"bias", "hc_base"}, {"num_iters", "sinkhorn_iters"}});
  }
  return {y.view(with_lead(s, {s.D})), post.view(with_lead(s, {s.N})), comb.view(with_lead(s, {s.N, s.N}))};
}

// MhcPost of the streams `residual` with the sub-layer's output x; the argument names
// are SGLang's (post, comb) or vLLM's (post_layer_mix, comb_res_mix).
Tensor residual_update(const Tensor& x, const Tensor& residual, const Tensor& post, const Tensor& comb,
                       const char* post_name, const char* comb_name) {
  const OnTorchThreads on_torch_threads;
  const Streams s = streams(residual, "residual");
  const Tensor h_out = per_token(x, "x", s.T, {s.D});
  const Tensor h_post = per_token(post, post_name, s.T, {s.N}, true);
  const Tensor h_res = per_token(comb, comb_name, s.T, {s.N, s.N});
  check_devices(s.flat, "residual", {{&x, "x"}, {&post, post_name}, {&comb, comb_name}});
  Tensor out = like_streams(s, {s.T, s.N, s.D});
  if (!s.flat.is_meta()) {
    const PostForwardInputs in{view_of(s.flat, "residual"), view_of(h_res, comb_name), view_of(h_out, "x"),
                               view_of(h_post, post_name)};
    raise_on_error(post_forward(in, {view_of(out, "out")}, options()),
                   {{"x", "residual"}, {"h_res", comb_name}, {"h_out", "x"}, {"h_post", post_name}});
  }
  return out.view(residual.sizes());
}

Tensor hc_post_fused_cpu(const Tensor& x, const Tensor& residual, const Tensor& post, const Tensor& comb) {
  return residual_update(x, residual, post, comb, "post", "comb");
}

Tensor mhc_post(const Tensor& x, const Tensor& residual, const Tensor& post_layer_mix, const Tensor& comb_res_mix) {
  return residual_update(x, residual, post_layer_mix, comb_res_mix, "post_layer_mix", "comb_res_mix");
}

Tensor hc_head_fused_cpu(const Tensor& x, const Tensor& hc_fn, const Tensor& hc_scale, const Tensor& hc_base,
                         double hc_eps, double norm_eps) {
  const OnTorchThreads on_torch_threads;
  const Streams s = streams(x, "x");
  check_shape(hc_fn, "hc_fn", {s.N, s.N * s.D});
  check_entries(hc_scale, "hc_scale", 1);
  check_shape(hc_base, "hc_base", {s.N});
  check_eps("hc_eps", hc_eps);
  check_eps("norm_eps", norm_eps);
  check_devices(s.flat, "x", {{&hc_fn, "hc_fn"}, {&hc_scale, "hc_scale"}, {&hc_base, "hc_base"}});
  Tensor h = like_streams(s, {s.T, s.D});
  if (!s.flat.is_meta()) {
    const PreForwardInputs in{view_of(s.flat, "x"), view_of(hc_fn, "hc_fn"), view_of(hc_scale.reshape({1}), "hc_scale"),
                              view_of(hc_base, "hc_base"), std::nullopt};
    std::shared_ptr<const PreparedPre> held;  // identity and version: the caller's hc_scale
    const Options o = prepared(options(norm_eps, hc_eps), &held, hc_fn, in.phi, hc_scale, in.alpha, hc_base, in.bias);
    raise_on_error(pre_forward(in, {view_of(h, "h"), {}, {}, {}, {}, {}}, o),
                   {{"phi", "hc_fn"}, {"alpha", "hc_scale"}, {"bias", "hc_base"}});
  }
  return h.view(with_lead(s, {s.D}));
}

// ------------------------------------------------------------------ vLLM's

// The eps and the multiplier of vLLM's pre, in its words.
void check_site_scalars(double rms_eps, double hc_pre_eps, double hc_sinkhorn_eps, double mult,
                        const c10::optional<Tensor>& norm_weight, double norm_eps, const Streams& s) {
  check_eps("rms_eps", rms_eps);
  check_eps("hc_pre_eps", hc_pre_eps);
  check_eps("hc_sinkhorn_eps", hc_sinkhorn_eps);
  check_finite("hc_post_mult_value", mult);
  if (norm_weight.has_value()) {
    check_shape(*norm_weight, "norm_weight", {s.D});
    check_eps("norm_eps", norm_eps);
  }
}

constexpr std::initializer_list<std::pair<const char*, const char*>> kSiteNames = {
    {"x", "residual"}, {"phi", "fn"}, {"alpha", "hc_scale"}, {"bias", "hc_base"},
    {"num_iters", "sinkhorn_repeat"}, {"sinkhorn_eps", "hc_sinkhorn_eps"}};

// One site's pre on checked streams: V4 (the site's own h_pre; the fused pair when one
// eps serves the gate and the Sinkhorn, else MhcPre then MhcSinkhorn: the same bits) or
// V4.1 (single_pass: the carried pre_mix). Returns (h_in, h_post, comb, h_pre).
std::tuple<Tensor, Tensor, Tensor, Tensor> site_pre(const Streams& s, const Tensor& fn, const Tensor& hc_scale,
                                                    const Tensor& hc_base, double rms_eps, double hc_pre_eps,
                                                    double hc_sinkhorn_eps, int64_t repeat, bool single_pass,
                                                    const c10::optional<Tensor>& pre_mix) {
  const int64_t T = s.T, N = s.N, F = fn.size(0);
  Tensor carried;
  if (single_pass && pre_mix.has_value()) carried = per_token(*pre_mix, "pre_mix", T, {N});
  Tensor h_in = like_streams(s, {T, s.D}), h_post = fp32(s, {T, N}), comb = fp32(s, {T, N, N}),
         h_pre = fp32(s, {T, N});
  if (s.flat.is_meta()) return {h_in, h_post, comb, h_pre};
  const TensorView x = view_of(s.flat, "residual"), phi = view_of(fn, "fn"), alpha = view_of(hc_scale, "hc_scale"),
                   bias = view_of(hc_base, "hc_base");
  std::shared_ptr<const PreparedPre> held;
  const Options o = prepared(options(rms_eps, hc_pre_eps), &held, fn, phi, hc_scale, alpha, hc_base, bias);
  if (single_pass) {
    std::optional<TensorView> carried_view;
    if (carried.defined()) carried_view = view_of(carried, "pre_mix");
    Tensor inv_rms = fp32(s, {T}), h_mix = fp32(s, {T, F});
    raise_on_error(pre_single_pass_forward({x, phi, alpha, bias, std::nullopt, carried_view, hc_sinkhorn_eps, repeat},
                                           {view_of(h_in, "layer_input"), view_of(h_pre, "next_pre"),
                                            view_of(h_post, "post"), view_of(comb, "comb"),
                                            view_of(inv_rms, "inv_rms"), view_of(h_mix, "h_mix")},
                                           o),
                   kSiteNames);
  } else if (hc_pre_eps == hc_sinkhorn_eps) {
    raise_on_error(pre_sinkhorn_forward({x, phi, alpha, bias, repeat}, {view_of(h_in, "layer_input"),
                                                                         view_of(h_post, "post"), view_of(comb, "comb"),
                                                                         {}, {}, {}, {}, {}},
                                        o),
                   kSiteNames);
  } else {
    Tensor z = fp32(s, {T, N, N});
    raise_on_error(pre_forward({x, phi, alpha, bias, std::nullopt},
                               {view_of(h_in, "layer_input"), view_of(h_post, "post"), view_of(z, "z"), {}, {}, {}}, o),
                   kSiteNames);
    raise_on_error(sinkhorn_forward({view_of(z, "z"), hc_sinkhorn_eps, repeat}, {view_of(comb, "comb"), {}, {}},
                                    options()),
                   kSiteNames);
  }
  return {h_in, h_post, comb, h_pre};
}

// (post [..., N, 1], comb [..., N, N], layer_input [..., D], next_pre [..., N] or [0])
std::tuple<Tensor, Tensor, Tensor, Tensor> mhc_pre(const Tensor& residual, const Tensor& fn, const Tensor& hc_scale,
                                                   const Tensor& hc_base, double rms_eps, double hc_pre_eps,
                                                   double hc_sinkhorn_eps, double hc_post_mult_value,
                                                   int64_t sinkhorn_repeat, const c10::optional<Tensor>& norm_weight,
                                                   double norm_eps, bool single_pass,
                                                   const c10::optional<Tensor>& pre_mix) {
  const OnTorchThreads on_torch_threads;
  const Streams s = streams(residual, "residual");
  check_pre_weights(s, fn, "fn", hc_scale, "hc_scale", hc_base, "hc_base");
  check_site_scalars(rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, norm_weight, norm_eps, s);
  const Tensor none;
  check_devices(s.flat, "residual", {{&fn, "fn"}, {&hc_scale, "hc_scale"}, {&hc_base, "hc_base"},
                         {norm_weight.has_value() ? &*norm_weight : &none, "norm_weight"},
                         {pre_mix.has_value() ? &*pre_mix : &none, "pre_mix"}});
  auto [h_in, h_post, comb, h_pre] = site_pre(s, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                              sinkhorn_repeat, single_pass, pre_mix);
  scale_post(h_post, hc_post_mult_value);
  Tensor next_pre = single_pass ? h_pre.view(with_lead(s, {s.N})) : fp32(s, {0});
  return {h_post.view(with_lead(s, {s.N, 1})), comb.view(with_lead(s, {s.N, s.N})),
          layer_input(h_in, norm_weight, norm_eps).view(with_lead(s, {s.D})), next_pre};
}

// MhcPost then the next V4 pre, one pass over the streams (MhcPostPre).
std::tuple<Tensor, Tensor, Tensor, Tensor> mhc_fused_post_pre(
    const Tensor& x, const Tensor& residual, const Tensor& post_layer_mix, const Tensor& comb_res_mix,
    const Tensor& fn, const Tensor& hc_scale, const Tensor& hc_base, double rms_eps, double hc_pre_eps,
    double hc_sinkhorn_eps, double hc_post_mult_value, int64_t sinkhorn_repeat,
    const c10::optional<Tensor>& norm_weight, double norm_eps) {
  const OnTorchThreads on_torch_threads;
  const Streams s = streams(residual, "residual");
  const int64_t T = s.T, N = s.N, D = s.D, F = 2 * N + N * N;
  const Tensor h_out = per_token(x, "x", T, {D});
  const Tensor h_post_in = per_token(post_layer_mix, "post_layer_mix", T, {N}, true);
  const Tensor h_res = per_token(comb_res_mix, "comb_res_mix", T, {N, N});
  check_pre_weights(s, fn, "fn", hc_scale, "hc_scale", hc_base, "hc_base");
  check_site_scalars(rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, norm_weight, norm_eps, s);
  const Tensor none;
  check_devices(s.flat, "residual", {{&x, "x"}, {&post_layer_mix, "post_layer_mix"}, {&comb_res_mix, "comb_res_mix"},
                         {&fn, "fn"}, {&hc_scale, "hc_scale"}, {&hc_base, "hc_base"},
                         {norm_weight.has_value() ? &*norm_weight : &none, "norm_weight"}});
  Tensor x_next = like_streams(s, {T, N, D}), h_in = like_streams(s, {T, D});
  Tensor h_pre = fp32(s, {T, N}), h_post = fp32(s, {T, N}), comb = fp32(s, {T, N, N});
  if (!s.flat.is_meta()) {
    Tensor inv_rms = fp32(s, {T}), h_mix = fp32(s, {T, F});
    const PostPreForwardInputs in{view_of(s.flat, "residual"), view_of(h_res, "comb_res_mix"), view_of(h_out, "x"),
                                  view_of(h_post_in, "post_layer_mix"), view_of(fn, "fn"),
                                  view_of(hc_scale, "hc_scale"), view_of(hc_base, "hc_base"), std::nullopt,
                                  std::nullopt, 0, hc_sinkhorn_eps, sinkhorn_repeat};
    std::shared_ptr<const PreparedPre> held;
    const Options o =
        prepared(options(rms_eps, hc_pre_eps), &held, fn, in.phi, hc_scale, in.alpha, hc_base, in.bias);
    raise_on_error(post_pre_forward(in,
                                    {view_of(x_next, "residual_cur"), view_of(h_in, "layer_input_cur"),
                                     view_of(h_pre, "h_pre"), view_of(h_post, "post_cur"), view_of(comb, "comb_cur"),
                                     view_of(inv_rms, "inv_rms"), view_of(h_mix, "h_mix")},
                                    o),
                   {{"x", "residual"}, {"h_res", "comb_res_mix"}, {"h_out", "x"}, {"h_post", "post_layer_mix"},
                    {"phi", "fn"}, {"alpha", "hc_scale"}, {"bias", "hc_base"}, {"num_iters", "sinkhorn_repeat"},
                    {"sinkhorn_eps", "hc_sinkhorn_eps"}});
  }
  scale_post(h_post, hc_post_mult_value);
  return {x_next.view(residual.sizes()), h_post.view(with_lead(s, {N, 1})), comb.view(with_lead(s, {N, N})),
          layer_input(h_in, norm_weight, norm_eps).view(with_lead(s, {D}))};
}

// MhcRmsNorm of [..., D] rows.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const OnTorchThreads on_torch_threads;
  TORCH_CHECK_VALUE(x.defined() && x.dim() >= 1, "x: expected a tensor [..., D]");
  const Streams s = streams(x.unsqueeze(-2), "x");  // [..., 1, D]: the same checks
  check_shape(weight, "weight", {s.D});
  check_eps("eps", eps);
  check_devices(s.flat, "x", {{&weight, "weight"}});
  Tensor y = like_streams(s, {s.T, s.D});
  if (!s.flat.is_meta())
    raise_on_error(rms_norm_forward({view_of(s.flat.squeeze(1), "x"), view_of(weight, "weight"), eps},
                                    {view_of(y, "y")}, options()));
  return y.view(x.sizes());
}

// ------------------------------------------------------------------ registration

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
  define(m, "mhc_post(Tensor x, Tensor residual, Tensor post_layer_mix, Tensor comb_res_mix) -> Tensor", "mhc_post",
         TORCH_FN(mhc_post));
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
  // The implicit cache of prepared weights: [weight sets held, handles made]; clearing it.
  m.def("prepared_cache_info() -> int[]", [] {
    const PreparedCacheInfo info = prepared_cache_info();
    return std::vector<int64_t>{info.entries, info.made};
  });
  m.def("clear_prepared_cache() -> ()", [] { clear_prepared_cache(); });
}

}  // namespace mhc::torch_face
