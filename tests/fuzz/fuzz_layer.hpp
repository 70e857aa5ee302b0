// The fuzz targets of the rest of the layer (docs/reliability.md, "Fuzzing"):
// MhcSinkhorn, MhcPost, the fused MhcPreSinkhorn, V4.1's MhcPreSinglePass and
// MhcCollapse, the fused boundary MhcPostPre and the engines' MhcRmsNorm
// (fuzz_layer_v41.cpp), the site backward (fuzz_layer_site.cpp), forward or
// backward (the input's first byte; MhcRmsNorm has only a forward, the site
// backward's prepare is its forward and its finish its backward), through the C++
// and the C face.
//
// One input, one call, generated as for the MhcPre targets (fuzz_common.hpp:
// shapes, dtypes, scalars among the edge values, then per tensor a layout and
// mutations, placement in one exactly-sized arena). The checks:
//   - rejected: the C++ face, the C face and ops::*::validate agree on code, kind
//     and message; not one arena byte changed (a NULL required C argument: 161001);
//   - accepted: only bytes of output elements changed; then, on a copy of the
//     arena as it was, the oracle: MhcSinkhorn, MhcPost, MhcCollapse and MhcRmsNorm run by the
//     reference family give the same bits (SPEC §10/§11/§14: every family does),
//     NaN where NaN; MhcPreSinkhorn on a family other than the reference gives the
//     bits of the unfused chain (SPEC §12); MhcPreSinglePass's forward without
//     pre_mix on a family other than the reference gives h_in = x's stream 0 bit
//     for bit (SPEC §14); MhcPostPre's forward gives the bits of the unfused chain
//     (MhcPost, then MhcPre + MhcSinkhorn or MhcPreSinglePass: SPEC §15) on every
//     family; the site backward's prepare and finish give, on every family, the bits
//     of the unfused chain (MhcPostBackward with an fp32 grad_x, then the site's pre
//     backward with it as grad_x_post: SPEC §15); and a rerun with another thread
//     count at another address gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "fuzz_common.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"

namespace mhc_fuzz {

enum class LayerOp { sinkhorn, post, pre_sinkhorn, single_pass, collapse, post_pre, rms_norm, site };
void run_layer_target(const uint8_t* data, size_t size, LayerOp op);

namespace layer {

// One call's problem as generated (a mutated tensor may then disagree with it).
struct LayerProblem {
  LayerOp op = LayerOp::sinkhorn;
  bool backward = false;
  bool bsnd = false;
  int64_t B = 1, S = 3, N = 4, D = 8;
  int64_t I = 3;  // num_iters
  int64_t pitch = 4;
  bool caches = true;         // Sinkhorn / fused caches given
  bool from_z = false;        // the Sinkhorn backward from z
  bool h_res = true;          // post: h_res given
  bool grad_h_res = true;     // post backward: grad_h_res asked for
  bool flat = false;          // fused, single pass: h_res, grad_h_res as [.., N*N]
  bool gamma = false;         // single pass: gamma (and grad_gamma) given
  bool pre_mix = true;        // single pass: pre_mix given (absent: the first site)
  bool grad_h_pre = true;     // single pass backward: grad_h_pre given (absent: 0)
  bool grad_x_post = false;   // single pass backward: grad_x_post given (grad_x_dtype); post_pre, site: grad_x_next
  bool grad_pre_mix = true;   // single pass backward: asked for (without pre_mix: a rejection)
  bool v41 = false;           // post_pre: site s+1 is a single pass (single_pass = 1); site: finish's single_pass
  mhc::DType x_dtype = mhc::DType::bf16;
  int32_t grad_x_dtype = MHC_BF16;
  double eps = 1e-6, hc_eps = 1e-6, norm_eps = 1e-6;  // eps: the Sinkhorn's (sinkhorn_eps)
  int threads = 0;
  mhc::Isa isa = mhc::Isa::automatic;
  int64_t T() const { return B * S; }
  int64_t K() const { return N * D; }
  int64_t F() const { return 2 * N + N * N; }
  const char* name() const {
    static const char* names[8][2] = {{"sinkhorn_forward", "sinkhorn_backward"},
                                      {"post_forward", "post_backward"},
                                      {"pre_sinkhorn_forward", "pre_sinkhorn_backward"},
                                      {"pre_single_pass_forward", "pre_single_pass_backward"},
                                      {"collapse_forward", "collapse_backward"},
                                      {"post_pre_forward", "post_pre_backward"},
                                      {"rms_norm_forward", "rms_norm_forward"},
                                      {"site_backward_prepare", "site_backward_finish"}};
    return names[int(op)][backward];
  }
};

// A per-token shape: [B, S, inner..] or [T, inner..].
std::vector<int64_t> tokens(const LayerProblem& p, std::initializer_list<int64_t> inner);

// The case's tensors as the C++ face's arguments, data pointers into `base`.
struct Views {
  Case& c;
  uint8_t* base;
  mhc::TensorView req(const char* name) const;  // a required argument "absent": an empty view
  std::optional<mhc::TensorView> opt(const char* name) const;
};

// A contiguous fp32 buffer with a view of `shape` on it.
struct Scratch {
  std::vector<float> data;
  mhc::TensorView view;
  explicit Scratch(const std::vector<int64_t>& shape);
};

// A flat [.., N*N] view as [.., N, N]; [.., N, N] as it is.
mhc::TensorView as_matrices(mhc::TensorView v, int64_t N, int token_dims);

// The V4.1 and boundary operators' parts (fuzz_layer_v41.cpp), for p.op single_pass,
// collapse or post_pre: the tensors, the call through the C++ face, validation (and
// workspace sizing) through the operator layer, and the oracles of an accepted call:
// on `after`, the arena once the call has run; on `copy`, the arena as it was, where
// the unfused chain writes the boundary's outputs.
std::vector<Slot> v41_slots(const LayerProblem& p);
mhc::Status v41_call_cpp(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o);
mhc::Status v41_validate(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o, bool size);
void v41_check_first_site(Case& c, const LayerProblem& p, uint8_t* after, const mhc::Options& o);
void v41_unfused_boundary(Case& c, const LayerProblem& p, uint8_t* copy, const mhc::Options& o);

// The site backward's parts (fuzz_layer_site.cpp), for p.op site (prepare when
// !p.backward, finish when p.backward): as above, and the unfused chain that writes
// the call's outputs on `copy`, the arena as it was.
std::vector<Slot> site_slots(const LayerProblem& p);
mhc::Status site_call_cpp(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o);
mhc::Status site_validate(Case& c, const LayerProblem& p, uint8_t* base, const mhc::Options& o, bool size);
void site_unfused(Case& c, const LayerProblem& p, uint8_t* copy, const mhc::Options& o);

}  // namespace layer
}  // namespace mhc_fuzz
