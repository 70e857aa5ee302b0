// MhcPost and MhcPostBackward in SPEC's fp32 steps (§11): one token at a time, one
// element at a time, SPEC's fp32 operations in SPEC's order. The portable family
// uses these loops too; the SIMD family gives the same bits. Each sum starts
// from its first term and adds the others in index order.
#include "core/dtype.hpp"
#include "kernels/common/post_grad_x.hpp"
#include "kernels/common/post_sums.hpp"
#include "kernels/tables.hpp"

namespace mhc::kernels::fp32_steps {
namespace {

int64_t no_floats(const PostShape&) { return 0; }

void forward(const PostForwardOperands& o, float*, int64_t t0, int64_t t1, int64_t d0, int64_t d1) {
  const PostShape& s = o.shape;
  const DType dt = s.x_dtype;
  for (int64_t t = t0; t < t1; ++t) {
    const float* h_post = o.h_post.at(t);
    const float* H = s.has_h_res ? o.h_res.at(t) : nullptr;
    for (int64_t j = 0; j < s.N; ++j) {
      for (int64_t d = d0; d < d1; ++d) {
        const float h_out = core::load_element(o.h_out.data, dt, o.h_out.at(t, 0) + d);
        float acc;
        if (H != nullptr) {
          acc = h_post[j] * h_out;
          for (int64_t i = 0; i < s.N; ++i)  // H transposed: column j
            acc = acc + H[i * s.N + j] * core::load_element(o.x.data, dt, o.x.at(t, i) + d);
        } else {
          acc = core::load_element(o.x.data, dt, o.x.at(t, j) + d) + h_post[j] * h_out;
        }
        core::store_element(o.out.data, dt, o.out.at(t, j) + d, acc);
      }
    }
  }
}

void backward(const PostBackwardOperands& o, float*, int64_t t0, int64_t t1) {
  const PostShape& s = o.shape;
  const DType dt = s.x_dtype;
  const int64_t N = s.N, D = s.D;
  auto g = [&](int64_t t, int64_t j, int64_t d) { return core::load_element(o.grad_out.data, dt, o.grad_out.at(t, j) + d); };
  for (int64_t t = t0; t < t1; ++t) {
    const float* h_post = o.h_post.at(t);
    const float* H = s.has_h_res ? o.h_res.at(t) : nullptr;
    for (int64_t d = 0; d < D; ++d) {
      if (o.grad_x.present())  // absent: the site backward's prepare (SPEC §15)
        for (int64_t i = 0; i < N; ++i)
          core::store_element(o.grad_x.data, s.grad_x_dtype, o.grad_x.at(t, i) + d,
                              common::post_grad_x(H, N, i, [&](int64_t j) { return g(t, j, d); }));
      float acc = h_post[0] * g(t, 0, d);
      for (int64_t j = 1; j < N; ++j) acc = acc + h_post[j] * g(t, j, d);
      core::store_element(o.grad_h_out.data, dt, o.grad_h_out.at(t, 0) + d, acc);
    }
    common::post_sums_over_d(o, t);
  }
}

}  // namespace

const PostKernels kPost = {.forward_scratch_floats = no_floats,
                           .backward_scratch_floats = no_floats,
                           .forward = forward,
                           .backward = backward};

}  // namespace mhc::kernels::fp32_steps
