// The layer operators' benchmark cases (layer_cases.hpp).
#include "layer_cases.hpp"

#include <cstdlib>
#include <memory>
#include <optional>

namespace mhc_bench {
namespace {

using mhc::DType;
using mhc::TensorView;

struct Buffer {
  void* data = nullptr;
  explicit Buffer(size_t bytes) : data(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64))) {
    if (data == nullptr) std::exit(1);
    zero(data, int64_t(bytes));
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

template <class Call>
LayerCase timed(const char* name, const char* op, const std::string& shape, OperatorCost cost, int threads, int runs,
                double min_seconds, Call call) {
  LayerCase c{name, op, shape, cost, {}, {}};
  c.main_timing = time_calls([&] { call(threads); }, runs, min_seconds, 1000);
  if (threads > 1) c.one_thread_timing = time_calls([&] { call(1); }, runs, min_seconds, 1000);
  return c;
}

std::vector<LayerCase> post_cases(int threads, int runs, double min_seconds) {
  const int64_t T = 4096, N = 4, D = 4096;
  const double e = 2;  // bf16
  Buffer x(T * N * D * 2), h_res(T * N * N * 4), h_out(T * D * 2), h_post(T * N * 4), out(T * N * D * 2);
  Buffer grad_out(T * N * D * 2), grad_x(T * N * D * 2), grad_h_res(T * N * N * 4), grad_h_out(T * D * 2),
      grad_h_post(T * N * 4);
  fill_activation(x.data, DType::bf16, T * N * D, 1, 1.0f);
  fill_activation(h_out.data, DType::bf16, T * D, 2, 1.0f);
  fill_activation(grad_out.data, DType::bf16, T * N * D, 3, 1.0f);
  fill_f32(h_res.data, T * N * N, 4, 0.5f, 0.25f);
  fill_f32(h_post.data, T * N, 5, 1.0f, 1.0f);
  const mhc::PostForwardInputs in{TensorView(x.data, DType::bf16, {T, N, D}),
                                  TensorView(h_res.data, DType::fp32, {T, N, N}),
                                  TensorView(h_out.data, DType::bf16, {T, D}),
                                  TensorView(h_post.data, DType::fp32, {T, N})};
  const mhc::PostForwardOutputs fwd_out{TensorView(out.data, DType::bf16, {T, N, D})};
  const mhc::PostBackwardInputs bwd_in{TensorView(grad_out.data, DType::bf16, {T, N, D}), in.x, in.h_res, in.h_out,
                                       in.h_post};
  const mhc::PostBackwardOutputs bwd_out{TensorView(grad_x.data, DType::bf16, {T, N, D}),
                                         TensorView(grad_h_res.data, DType::fp32, {T, N, N}),
                                         TensorView(grad_h_out.data, DType::bf16, {T, D}),
                                         TensorView(grad_h_post.data, DType::fp32, {T, N})};
  const double small = T * N * N * 4.0 + T * N * 4.0;  // h_res, h_post
  OperatorCost fwd{double(T * N * D) * (2 * N + 2), 2 * T * N * D * e + T * D * e + small};
  OperatorCost bwd{double(T * N * D) * (2 * N + 2 * N + 2) + double(T * D) * 2 * N,
                   3 * T * N * D * e + 2 * T * D * e + 2 * small};
  const std::string shape = "T=4096 N=4 D=4096 bf16";
  std::vector<LayerCase> cases;
  cases.push_back(timed("post", "forward", shape, fwd, threads, runs, min_seconds, [&](int n) {
    mhc::Options o;
    o.num_threads = n;
    require(mhc::post_forward(in, fwd_out, o), "post forward");
  }));
  cases.push_back(timed("post", "backward", shape, bwd, threads, runs, min_seconds, [&](int n) {
    mhc::Options o;
    o.num_threads = n;
    require(mhc::post_backward(bwd_in, bwd_out, o), "post backward");
  }));
  return cases;
}

std::vector<LayerCase> sinkhorn_cases(int threads, int runs, double min_seconds) {
  const int64_t T = 65536, N = 4, I = 20, P = 8;
  Buffer z(T * N * N * 4), h(T * N * N * 4), grad_h(T * N * N * 4), grad_z(T * N * N * 4);
  Buffer norm_out(2 * I * T * N * P * 4), sum_out(2 * I * T * P * 4);
  fill_f32(z.data, T * N * N, 6, 4.0f, -2.0f);
  fill_f32(grad_h.data, T * N * N, 7, 2.0f, -1.0f);
  const TensorView zv(z.data, DType::fp32, {T, N, N}), hv(h.data, DType::fp32, {T, N, N});
  const TensorView norm(norm_out.data, DType::fp32, {2 * I, T, N, P}), sum(sum_out.data, DType::fp32, {2 * I, T, P});
  const TensorView gh(grad_h.data, DType::fp32, {T, N, N}), gz(grad_z.data, DType::fp32, {T, N, N});
  const double matrix = T * N * N * 4.0, caches = 2.0 * I * T * (N * P + P) * 4;
  // flops: the softmax (an exp taken as 12 operations, a max, an add, a division per
  // entry) and 2I-1 normalisations of an add and a division per entry; the backward
  // twice that per normalisation.
  const double fwd_flops = double(T * N * N) * (15 + 2 * (2 * I - 1));
  const double bwd_flops = double(T * N * N) * (4 + 4 * (2 * I - 1));
  const std::string shape = "T=65536 N=4 I=20";
  auto options = [](int n) { mhc::Options o; o.num_threads = n; return o; };
  std::vector<LayerCase> cases;
  cases.push_back(timed("sinkhorn", "forward", shape + " caches", {fwd_flops, 2 * matrix + caches}, threads, runs,
                        min_seconds, [&](int n) {
                          require(mhc::sinkhorn_forward({zv, 1e-6, I}, {hv, norm, sum}, options(n)), "sinkhorn forward");
                        }));
  cases.push_back(timed("sinkhorn", "backward", shape + " caches", {bwd_flops, 2 * matrix + caches}, threads, runs,
                        min_seconds, [&](int n) {
                          require(mhc::sinkhorn_backward({gh, norm, sum, std::nullopt}, {gz}, options(n)),
                                  "sinkhorn backward");
                        }));
  cases.push_back(timed("sinkhorn", "fwd+bwd", shape + " recompute", {2 * fwd_flops + bwd_flops, 5 * matrix}, threads,
                        runs, min_seconds, [&](int n) {
                          require(mhc::sinkhorn_forward({zv, 1e-6, I}, {hv, std::nullopt, std::nullopt}, options(n)),
                                  "sinkhorn forward");
                          require(mhc::sinkhorn_backward({gh, std::nullopt, std::nullopt, zv, 1e-6, I}, {gz},
                                                         options(n)),
                                  "sinkhorn backward");
                        }));
  return cases;
}

// The layer boundary (SPEC §15) at T=4096 N=4 D=4096 bf16: MhcPostPre forward in
// both variants beside the unfused pair it replaces (the same bits), and the
// single-pass backward beside MhcPreBackward alone and with MhcSinkhornBackward
// (recomputed from z) on the same shape. bytes: the boundary's minimum, read x_s and y,
// write x_{s+1} and h_in (SPEC §15); the backward's: its inputs read once.
std::vector<LayerCase> boundary_cases(int threads, int runs, double min_seconds) {
  const int64_t T = 4096, N = 4, D = 4096, K = N * D, F = 2 * N + N * N, I = 20;
  const double e = 2;  // bf16
  Buffer x(T * K * 2), h_res(T * N * N * 4), y(T * D * 2), h_post(T * N * 4), x_next(T * K * 2);
  Buffer phi(F * K * 4), alpha(3 * 4), bias(F * 4), pre_mix(T * N * 4);
  Buffer h_in(T * D * 2), h_pre(T * N * 4), h_post_next(T * N * 4), h_res_next(T * N * N * 4), z(T * N * N * 4);
  Buffer inv_rms(T * 4), h_mix(T * F * 4), grad_h_in(T * D * 2), grad_h_pre(T * N * 4), grad_h_post(T * N * 4);
  Buffer grad_h_res(T * N * N * 4), grad_z(T * N * N * 4), grad_x(T * K * 2), grad_pre_mix(T * N * 4);
  Buffer grad_phi(F * K * 4), grad_alpha(3 * 4), grad_bias(F * 4);
  fill_activation(x.data, DType::bf16, T * K, 11, 1.0f);
  fill_activation(y.data, DType::bf16, T * D, 12, 1.0f);
  fill_activation(grad_h_in.data, DType::bf16, T * D, 13, 1.0f);
  fill_f32(h_res.data, T * N * N, 14, 0.5f, 0.0f);
  fill_f32(h_post.data, T * N, 15, 1.0f, 0.5f);
  fill_f32(phi.data, F * K, 16, 0.02f, -0.01f);
  fill_f32(alpha.data, 3, 17, 0.5f, 0.5f);
  fill_f32(bias.data, F, 18, 1.0f, -0.5f);
  fill_f32(pre_mix.data, T * N, 19, 1.0f, 0.0f);
  fill_f32(grad_h_pre.data, T * N, 20, 1.0f, -0.5f);
  fill_f32(grad_h_post.data, T * N, 21, 1.0f, -0.5f);
  fill_f32(grad_h_res.data, T * N * N, 22, 1.0f, -0.5f);
  auto v = [](Buffer& b, DType t, std::initializer_list<int64_t> shape) { return TensorView(b.data, t, shape); };
  const TensorView xv = v(x, DType::bf16, {T, N, D}), xn = v(x_next, DType::bf16, {T, N, D});
  const TensorView hres = v(h_res, DType::fp32, {T, N, N}), yv = v(y, DType::bf16, {T, D});
  const TensorView hpost = v(h_post, DType::fp32, {T, N}), phiv = v(phi, DType::fp32, {F, K});
  const TensorView alphav = v(alpha, DType::fp32, {3}), biasv = v(bias, DType::fp32, {F});
  const TensorView pmix = v(pre_mix, DType::fp32, {T, N}), hin = v(h_in, DType::bf16, {T, D});
  const TensorView hpre = v(h_pre, DType::fp32, {T, N}), hpn = v(h_post_next, DType::fp32, {T, N});
  const TensorView hrn = v(h_res_next, DType::fp32, {T, N, N}), zv = v(z, DType::fp32, {T, N, N});
  const TensorView rms = v(inv_rms, DType::fp32, {T}), mix = v(h_mix, DType::fp32, {T, F});
  const double small = T * N * N * 4.0 + 3 * T * N * 4.0 + T * (F + 1) * 4.0;
  const double pre_flops = 2.0 * T * F * K, post_flops = double(T * K) * (2 * N + 2);
  const OperatorCost boundary{pre_flops + post_flops, 2 * T * K * e + 2 * T * D * e + small};
  const std::string shape = "T=4096 N=4 D=4096 bf16";
  auto options = [](int n) { mhc::Options o; o.num_threads = n; return o; };
  std::vector<LayerCase> cases;
  for (int single_pass : {0, 1}) {
    const std::string variant = single_pass ? " V4.1" : " V4";
    const std::optional<TensorView> mix_in = single_pass ? std::optional<TensorView>(pmix) : std::nullopt;
    cases.push_back(timed("post_pre", "forward", shape + variant, boundary, threads, runs, min_seconds, [&](int n) {
      require(mhc::post_pre_forward({xv, hres, yv, hpost, phiv, alphav, biasv, std::nullopt, mix_in, single_pass,
                                     1e-6, I},
                                    {xn, hin, hpre, hpn, hrn, rms, mix}, options(n)),
              "post_pre forward");
    }));
    cases.push_back(timed("unfused", "forward", shape + variant, boundary, threads, runs, min_seconds, [&](int n) {
      require(mhc::post_forward({xv, hres, yv, hpost}, {xn}, options(n)), "post forward");
      if (single_pass) {
        require(mhc::pre_single_pass_forward({xn, phiv, alphav, biasv, std::nullopt, pmix, 1e-6, I},
                                             {hin, hpre, hpn, hrn, rms, mix}, options(n)),
                "single pass forward");
      } else {
        require(mhc::pre_forward({xn, phiv, alphav, biasv, std::nullopt}, {hin, hpn, zv, rms, mix, hpre}, options(n)),
                "pre forward");
        require(mhc::sinkhorn_forward({zv, 1e-6, I}, {hrn, std::nullopt, std::nullopt}, options(n)),
                "sinkhorn forward");
      }
    }));
  }
  // The backwards read the forward's caches (the V4.1 forward's last run above).
  const TensorView ghin = v(grad_h_in, DType::bf16, {T, D}), ghpre = v(grad_h_pre, DType::fp32, {T, N});
  const TensorView ghpost = v(grad_h_post, DType::fp32, {T, N}), ghres = v(grad_h_res, DType::fp32, {T, N, N});
  const TensorView gz = v(grad_z, DType::fp32, {T, N, N}), gx = v(grad_x, DType::bf16, {T, N, D});
  const TensorView gpmix = v(grad_pre_mix, DType::fp32, {T, N}), gphi = v(grad_phi, DType::fp32, {F, K});
  const TensorView galpha = v(grad_alpha, DType::fp32, {3}), gbias = v(grad_bias, DType::fp32, {F});
  const OperatorCost backward{2 * 2.0 * T * F * K, 2 * T * K * e + T * D * e + F * K * 4.0 + small};
  cases.push_back(timed("pre_sp", "backward", shape + " V4.1", backward, threads, runs, min_seconds, [&](int n) {
    require(mhc::pre_single_pass_backward({xn, phiv, alphav, biasv, std::nullopt, pmix, ghin, ghpre, ghpost, ghres,
                                           rms, mix, hpre, hpn, std::nullopt, 1e-6, I},
                                          {gx, gpmix, gphi, galpha, gbias, std::nullopt}, options(n)),
            "single pass backward");
  }));
  cases.push_back(timed("pre", "backward", shape + " V4", backward, threads, runs, min_seconds, [&](int n) {
    require(mhc::pre_backward({xn, phiv, alphav, ghin, ghpost, gz, rms, mix, hpre, hpn, std::nullopt, std::nullopt},
                              {gx, gphi, galpha, gbias, std::nullopt}, options(n)),
            "pre backward");
  }));
  cases.push_back(timed("pre+sk", "backward", shape + " V4", backward, threads, runs, min_seconds, [&](int n) {
    mhc::SinkhornBackwardInputs sin;
    sin.grad_h_res = ghres, sin.z = zv, sin.eps = 1e-6, sin.num_iters = I;
    require(mhc::sinkhorn_backward(sin, {gz}, options(n)), "sinkhorn backward");
    require(mhc::pre_backward({xn, phiv, alphav, ghin, ghpost, gz, rms, mix, hpre, hpn, std::nullopt, std::nullopt},
                              {gx, gphi, galpha, gbias, std::nullopt}, options(n)),
            "pre backward");
  }));
  // A site's whole backward (site x_next, its H = h_res_next, dY the gradient of its
  // output): the site backward's prepare + finish beside the unfused pair with an fp32
  // grad_x between them (the same bits). bytes: the two steps' minimum, 46 D a token
  // (SPEC §15: dY and x read twice, y and grad_h_in once, grad_y and grad_x written).
  Buffer grad_out(T * K * 2), grad_x32(T * K * 4), grad_y(T * D * 2), grad_h(T * N * N * 4), grad_hp(T * N * 4);
  fill_activation(grad_out.data, DType::bf16, T * K, 23, 1.0f);
  const TensorView dy = v(grad_out, DType::bf16, {T, N, D}), gx32 = v(grad_x32, DType::fp32, {T, N, D});
  const TensorView gy = v(grad_y, DType::bf16, {T, D}), gh = v(grad_h, DType::fp32, {T, N, N});
  const TensorView ghp = v(grad_hp, DType::fp32, {T, N});
  const OperatorCost site{backward.flops + double(T * K) * (6 * N + 4), 5 * T * K * e + 3 * T * D * e + F * K * 8.0 + small};
  for (int single_pass : {0, 1}) {
    const std::string variant = single_pass ? " V4.1" : " V4";
    const std::optional<TensorView> mix_in = single_pass ? std::optional<TensorView>(pmix) : std::nullopt;
    const std::optional<TensorView> gmix_out = single_pass ? std::optional<TensorView>(gpmix) : std::nullopt;
    const std::optional<TensorView> ghpre_in = single_pass ? std::optional<TensorView>(ghpre) : std::nullopt;
    cases.push_back(timed("site", "backward", shape + variant, site, threads, runs, min_seconds, [&](int n) {
      require(mhc::site_backward_prepare({dy, xn, hrn, yv, hpn}, {gh, gy, ghp}, options(n)), "site prepare");
      require(mhc::site_backward_finish({xn, phiv, alphav, biasv, std::nullopt, mix_in, hrn, dy, ghin, ghpre_in,
                                         ghpost, ghres, rms, mix, hpre, hpn, single_pass, 1e-6, I},
                                        {gx, gmix_out, gphi, galpha, gbias, std::nullopt}, options(n)),
              "site finish");
    }));
    cases.push_back(timed("unfused", "backward", shape + variant, site, threads, runs, min_seconds, [&](int n) {
      require(mhc::post_backward({dy, xn, hrn, yv, hpn}, {gx32, gh, gy, ghp}, options(n)), "post backward");
      if (single_pass) {
        require(mhc::pre_single_pass_backward({xn, phiv, alphav, biasv, std::nullopt, pmix, ghin, ghpre, ghpost,
                                               ghres, rms, mix, hpre, hpn, gx32, 1e-6, I},
                                              {gx, gpmix, gphi, galpha, gbias, std::nullopt}, options(n)),
                "single pass backward");
      } else {
        mhc::SinkhornBackwardInputs sin;
        sin.grad_h_res = ghres, sin.z = zv, sin.eps = 1e-6, sin.num_iters = I;
        require(mhc::sinkhorn_backward(sin, {gz}, options(n)), "sinkhorn backward");
        require(mhc::pre_backward({xn, phiv, alphav, ghin, ghpost, gz, rms, mix, hpre, hpn, std::nullopt, gx32},
                                  {gx, gphi, galpha, gbias, std::nullopt}, options(n)),
                "pre backward");
      }
    }));
  }
  return cases;
}

}  // namespace

bool is_layer_case(const std::string& name) { return name == "post" || name == "sinkhorn" || name == "boundary"; }

std::vector<LayerCase> run_layer_cases(const std::string& name, int threads, int runs, double min_seconds) {
  if (name == "post") return post_cases(threads, runs, min_seconds);
  if (name == "boundary") return boundary_cases(threads, runs, min_seconds);
  return sinkhorn_cases(threads, runs, min_seconds);
}

}  // namespace mhc_bench
