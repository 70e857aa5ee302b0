// What the operators composed of others (ops/pre_sinkhorn, ops/pre_single_pass)
// share: views of their workspace buffers and the checks of the residual branch
// their Sinkhorn needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops {

// A flat [.., N*N] view as [.., N, N] (the Sinkhorn's form); [.., N, N] as it is.
TensorView as_matrices(const TensorView& v, int64_t N, int token_dims);
// The same dims, contiguous, at `data` (a workspace buffer).
core::Strided contiguous_like(const core::Strided& s, void* data);
// phi in the permutation form (F = 2N + N!, SPEC §6) has no N*N residual logits for
// a Sinkhorn: named before the pre block's checks of the outputs (which would name
// h_res). `whose` says whose Sinkhorn ("the fused pair's").
Status check_residual_rows(const TensorView& x, const TensorView& phi, const char* whose);
// alpha [3]: `what` says why the operator needs the residual branch.
Status check_three_entries(const core::Dims& d, const TensorView& alpha, const char* what);
// Both, before the pre block's checks of the outputs (whose shapes follow from
// alpha's form); x, phi and alpha themselves are those checks' to name.
Status check_residual_branch(const TensorView& x, const TensorView& phi, const TensorView& alpha, const char* whose,
                             const char* what);

// The site's variant of the composed V4/V4.1 operators (MhcPostPre, the site backward):
// single_pass 0 (V4: no pre_mix, and no grad_pre_mix asked for) or 1 (V4.1).
Status check_site_variant(int64_t single_pass, bool pre_mix, bool grad_pre_mix);

// An inner operator's message in the composed operator's words: each whole word
// `own` said as `said` (the inner x is the composed operator's x_next, ...).
struct Rename {
  const char* own;
  const char* said;
};
Status renamed(const Status& s, std::initializer_list<Rename> renames);

// A non-null address that stands for a workspace buffer while sizing (layouts,
// not addresses, decide the workspace).
inline void* const kSizingAddress = reinterpret_cast<void*>(uintptr_t(64));
inline size_t aligned64(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace mhc::ops
