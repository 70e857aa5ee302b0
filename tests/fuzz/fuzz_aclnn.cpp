// libFuzzer targets of the aclnn face: GetWorkspaceSize + run of one operator
// (MHC_FUZZ_ACLNN_OP: 0 aclnnMhcPre, 1 aclnnMhcPreV2, 2 aclnnMhcPreBackward,
// 3 aclnnMhcPreBackwardV2), with aclTensors of any dims, strides, offset,
// storage, dtype and format over one arena, and the run phase misused on
// purpose (wrong operator, NULL or short workspace, dead stream, tensors
// destroyed first, executor destroyed, run twice).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnnop/aclnn_mhc_pre_backward_v2.h"
#include "aclnnop/aclnn_mhc_pre_v2.h"
#include "fuzz_aclnn_layer.hpp"
#include "fuzz_common.hpp"

#ifndef MHC_FUZZ_ACLNN_OP
#error "define MHC_FUZZ_ACLNN_OP (0..3)"
#endif

namespace {

using namespace mhc_fuzz;
using namespace mhc_fuzz::aclnn_layer;  // the run phase, the aclTensors and the failure check of every aclnn target

constexpr int kOp = MHC_FUZZ_ACLNN_OP;
constexpr bool kForward = kOp < 2;
constexpr bool kV2 = kOp == 1 || kOp == 3;

aclOpExecutor* const kExecutorSentinel = reinterpret_cast<aclOpExecutor*>(uintptr_t(0x5E5E5E40));
constexpr uint64_t kWorkspaceSentinel = 0xDEADBEEFull;

aclnnStatus phase1(Case& c, const std::vector<aclTensor*>& h, int64_t mode, uint64_t* ws, aclOpExecutor** ex) {
  const Problem& p = c.problem;
  auto at = [&](const char* name) {
    for (size_t i = 0; i < c.tensors.size(); ++i)
      if (std::strcmp(c.tensors[i].name, name) == 0) return h[i];
    fail(std::string("no slot ") + name);
  };
  if (kForward) {
    if (kV2)
      return aclnnMhcPreV2GetWorkspaceSize(at("x"), at("phi"), at("alpha"), at("bias"), at("gamma"), p.norm_eps,
                                           p.hc_eps, mode, at("h_in"), at("h_post"), at("h_res"), at("inv_rms"),
                                           at("h_mix"), at("h_pre"), ws, ex);
    return aclnnMhcPreGetWorkspaceSize(at("x"), at("phi"), at("alpha"), at("bias"), at("gamma"), p.norm_eps,
                                       p.hc_eps, at("h_in"), at("h_post"), at("h_res"), at("inv_rms"),
                                       at("h_mix"), at("h_pre"), ws, ex);
  }
  const float hc_eps = float(p.hc_eps);
  if (kV2)
    return aclnnMhcPreBackwardV2GetWorkspaceSize(
        at("x"), at("phi"), at("alpha"), at("grad_h_in"), at("grad_h_post"), at("grad_h_res"), at("inv_rms"),
        at("h_mix"), at("h_pre"), at("h_post"), at("gamma"), at("grad_x_post"), hc_eps, mode, at("grad_x"),
        at("grad_phi"), at("grad_alpha"), at("grad_bias"), at("grad_gamma"), ws, ex);
  return aclnnMhcPreBackwardGetWorkspaceSize(
      at("x"), at("phi"), at("alpha"), at("grad_h_in"), at("grad_h_post"), at("grad_h_res"), at("inv_rms"),
      at("h_mix"), at("h_pre"), at("h_post"), at("gamma"), at("grad_x_post"), hc_eps, at("grad_x"),
      at("grad_phi"), at("grad_alpha"), at("grad_bias"), at("grad_gamma"), ws, ex);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  Case c = generate(in, kForward ? Op::forward : Op::backward, true);
  describe(c);
  Arena arena(c);

  // aclTensors. A view may leave the arena only when the tensor declares no
  // storage (the library cannot know); then the call is only sized (phase 1).
  AclTensors tensors;
  tensors.create(in, c, arena);
  bool unguarded = false;
  for (bool u : tensors.unguarded) unguarded = unguarded || u;
  // A destroyed handle passed to phase 1 is an error, not a use after free.
  if (in.chance(8)) {
    const size_t i = in.pick(c.tensors.size());
    if (tensors.handles[i] != nullptr) {
      MHC_FUZZ_CHECK(aclDestroyTensor(tensors.handles[i]) == ACLNN_SUCCESS, "aclDestroyTensor");
      MHC_FUZZ_CHECK(aclDestroyTensor(tensors.handles[i]) == ACLNN_ERR_PARAM_INVALID, "aclDestroyTensor twice");
      uint64_t ws = kWorkspaceSentinel;
      aclOpExecutor* ex = kExecutorSentinel;
      const aclnnStatus s = phase1(c, tensors.handles, 0, &ws, &ex);
      check_failed(s, arena, "GetWorkspaceSize with a destroyed tensor");
      MHC_FUZZ_CHECK(ws == kWorkspaceSentinel && ex == kExecutorSentinel, "a failed GetWorkspaceSize wrote its results");
      tensors.handles[i] = nullptr;
      return 0;
    }
  }

  // Phase 1.
  static const int64_t modes[] = {0, 1, 0, 2, -1, INT64_MIN};
  const int64_t mode = kV2 ? modes[in.pick(6)] : 0;
  const bool null_ws = in.chance(6), null_ex = in.chance(6);
  uint64_t ws = kWorkspaceSentinel;
  aclOpExecutor* ex = kExecutorSentinel;
  const aclnnStatus s1 = phase1(c, tensors.handles, mode, null_ws ? nullptr : &ws, null_ex ? nullptr : &ex);
  if (s1 != ACLNN_SUCCESS) {
    check_failed(s1, arena, "GetWorkspaceSize");
    MHC_FUZZ_CHECK(ws == kWorkspaceSentinel && ex == kExecutorSentinel, "a failed GetWorkspaceSize wrote its results");
    return 0;
  }
  MHC_FUZZ_CHECK(!null_ws && !null_ex && (mode == 0 || mode == 1), "GetWorkspaceSize accepted a bad argument");
  MHC_FUZZ_CHECK(arena.unchanged(), "GetWorkspaceSize wrote to the arena");
  MHC_FUZZ_CHECK(ex != nullptr && ex != kExecutorSentinel && ws != kWorkspaceSentinel, "GetWorkspaceSize results");
  bool inside = true;
  for (const Tensor& t : c.tensors)
    if (t.present && !ignored_by_call(c, t) &&
        !view_inside(arena.base, arena.bytes, arena.base + t.byte_offset, t.dtype, t.rank, t.shape, t.strides))
      inside = false;
  if (!inside) {
    if (!unguarded) fail("GetWorkspaceSize accepted a view outside its declared storage");
    MHC_FUZZ_CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "destroying an executor that did not run");
    return 0;
  }

  // Phase 2, with misuse first: none of it may write or consume the executor.
  if (!run_phase(in, arena, kOp, 4, ws, ex, tensors)) return 0;
  const Acceptance how{false, mode == 1 ? mhc::MatmulPrecision::hf32 : mhc::MatmulPrecision::fp32};
  if (kForward) check_accepted_forward(c, arena, !in.chance(128), how);
  else check_accepted_backward(c, arena, !in.chance(128), how);

  check_second_use(in, arena, kOp, ws, ex);
  return 0;
}
