// The composed operators' shared views and checks (composition.hpp).
#include "ops/composition.hpp"

#include <string>

#include "ops/pre/operands.hpp"

namespace mhc::ops {

TensorView as_matrices(const TensorView& v, int64_t N, int token_dims) {
  if (v.rank != token_dims + 1 || v.rank + 1 > kMaxRank) return v;
  TensorView m = v;
  m.rank = v.rank + 1;
  m.shape[v.rank - 1] = N;
  m.shape[v.rank] = N;
  m.strides[v.rank - 1] = v.strides[v.rank - 1] * N;
  m.strides[v.rank] = v.strides[v.rank - 1];
  return m;
}

core::Strided contiguous_like(const core::Strided& s, void* data) {
  core::Strided c = s;
  c.data = data;
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    c.stride[i] = c.shape[i] > 1 ? stride : 0;
    stride *= c.shape[i];
  }
  return c;
}

Status check_residual_rows(const TensorView& x, const TensorView& phi, const char* whose) {
  if ((x.rank != 3 && x.rank != 4) || phi.rank != 2) return {};
  const int64_t N = x.shape[x.rank - 2];
  if (N < 1 || N > (int64_t(1) << 20)) return {};  // the pre block's checks name such x
  const int64_t R = N * N, permutations = factorial_saturated(N);
  // N = 1: the two forms are one; a negative F is the pre block's checks' to name
  if (permutations != R && phi.shape[0] >= 0 && phi.shape[0] - 2 * N == permutations)
    return shape_error("phi", "[F,N*D] with F = 2N+N*N = " + std::to_string(2 * N + R) + " (" + whose +
                                  " Sinkhorn takes N*N residual logits)",
                       phi);
  return {};
}

Status renamed(const Status& s, std::initializer_list<Rename> renames) {
  if (s.ok()) return s;
  return Status(s.code(), s.kind(), rename_words(s.message(), [&](const std::string& word) -> const char* {
                  for (const Rename& r : renames)
                    if (word == r.own) return r.said;
                  return nullptr;
                }));
}

Status check_residual_branch(const TensorView& x, const TensorView& phi, const TensorView& alpha, const char* whose,
                             const char* what) {
  MHC_RETURN_IF_ERROR(check_residual_rows(x, phi, whose));
  TokenSpace space;
  if (check_x("x", x, &space).ok() && check_phi_alpha("phi", phi, "alpha", alpha, &space.dims).ok())
    return check_three_entries(space.dims, alpha, what);
  return {};
}

Status check_site_variant(int64_t single_pass, bool pre_mix, bool grad_pre_mix) {
  if (single_pass != 0 && single_pass != 1)
    return value_error("single_pass", "expected 0 (V4) or 1 (V4.1), got " + std::to_string(single_pass));
  if (single_pass == 0 && pre_mix)
    return value_error("pre_mix", "expected absent with single_pass = 0 (V4 collapses with the site's own h_pre)");
  if (single_pass == 0 && grad_pre_mix)
    return value_error("grad_pre_mix", "expected absent with single_pass = 0 (V4 has no pre_mix)");
  return {};
}

Status check_three_entries(const core::Dims& d, const TensorView& alpha, const char* what) {
  if (d.alpha_entries() != 3) return shape_error("alpha", std::string("[3] (") + what + ")", alpha);
  return {};
}

}  // namespace mhc::ops
