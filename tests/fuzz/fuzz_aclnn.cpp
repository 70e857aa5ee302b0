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
#include "fuzz_common.hpp"

#ifndef MHC_FUZZ_ACLNN_OP
#error "define MHC_FUZZ_ACLNN_OP (0..3)"
#endif

namespace {

using namespace mhc_fuzz;

constexpr int kOp = MHC_FUZZ_ACLNN_OP;
constexpr bool kForward = kOp < 2;
constexpr bool kV2 = kOp == 1 || kOp == 3;

using RunFn = aclnnStatus (*)(void*, uint64_t, aclOpExecutor*, aclrtStream);
constexpr RunFn kRuns[4] = {aclnnMhcPre, aclnnMhcPreV2, aclnnMhcPreBackward, aclnnMhcPreBackwardV2};
constexpr const char* kNames[4] = {"aclnnMhcPre", "aclnnMhcPreV2", "aclnnMhcPreBackward", "aclnnMhcPreBackwardV2"};

aclOpExecutor* const kExecutorSentinel = reinterpret_cast<aclOpExecutor*>(uintptr_t(0x5E5E5E40));
constexpr uint64_t kWorkspaceSentinel = 0xDEADBEEFull;

int64_t acl_esize(int32_t acl_dtype) { return acl_dtype == 0 ? 4 : 2; }  // the valid ones only matter

void check_failed(aclnnStatus status, const Arena& arena, const char* what) {
  if (status != ACLNN_ERR_PARAM_NULLPTR && status != ACLNN_ERR_PARAM_INVALID)
    fail(std::string(what) + ": unexpected code " + std::to_string(status) + ": " + aclGetRecentErrMsg());
  MHC_FUZZ_CHECK(aclGetRecentErrMsg()[0] != '\0', std::string(what) + ": an error without a message");
  MHC_FUZZ_CHECK(arena.unchanged(), std::string(what) + ": a failed call wrote to the arena");
}

struct Handles {
  std::vector<aclTensor*> tensors;
  bool destroyed = false;
  void destroy() {
    if (destroyed) return;
    for (aclTensor* t : tensors)
      if (t != nullptr) MHC_FUZZ_CHECK(aclDestroyTensor(t) == ACLNN_SUCCESS, "aclDestroyTensor of a live tensor");
    destroyed = true;
  }
  ~Handles() { destroy(); }
};

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
  Handles handles;
  handles.tensors.assign(c.tensors.size(), nullptr);
  bool unguarded = false;
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    Tensor& t = c.tensors[i];
    if (!t.present) continue;
    const int64_t esize = acl_esize(t.acl_dtype);
    const bool plain_offset = t.acl_offset >= 0 && t.acl_offset <= 3;
    const int64_t base = plain_offset ? t.byte_offset - t.acl_offset * esize : t.byte_offset;
    const bool fits = plain_offset && element_size_of(t.dtype) != 0 &&
                      view_inside(arena.base, arena.bytes, arena.base + t.byte_offset, t.dtype, t.rank, t.shape,
                                  t.strides);
    if (!t.storage_given && !fits) {
      if (in.flag()) t.storage_given = true;
      else unguarded = true;
    }
    handles.tensors[i] = aclCreateTensor(
        t.shape, uint64_t(t.rank), aclDataType(t.acl_dtype), t.strides_given ? t.strides : nullptr, t.acl_offset,
        aclFormat(t.format), t.storage_given ? t.storage.data() : nullptr, t.storage_given ? t.storage.size() : 0,
        t.null_data ? nullptr : arena.base + base);
    if (handles.tensors[i] == nullptr) {
      MHC_FUZZ_CHECK(aclGetRecentErrMsg()[0] != '\0', "aclCreateTensor failed without a message");
      t.present = false;
    }
  }
  // A destroyed handle passed to phase 1 is an error, not a use after free.
  if (in.chance(8)) {
    const size_t i = in.pick(c.tensors.size());
    if (handles.tensors[i] != nullptr) {
      MHC_FUZZ_CHECK(aclDestroyTensor(handles.tensors[i]) == ACLNN_SUCCESS, "aclDestroyTensor");
      MHC_FUZZ_CHECK(aclDestroyTensor(handles.tensors[i]) == ACLNN_ERR_PARAM_INVALID, "aclDestroyTensor twice");
      uint64_t ws = kWorkspaceSentinel;
      aclOpExecutor* ex = kExecutorSentinel;
      const aclnnStatus s = phase1(c, handles.tensors, 0, &ws, &ex);
      check_failed(s, arena, "GetWorkspaceSize with a destroyed tensor");
      MHC_FUZZ_CHECK(ws == kWorkspaceSentinel && ex == kExecutorSentinel, "a failed GetWorkspaceSize wrote its results");
      handles.tensors[i] = nullptr;
      return 0;
    }
  }

  // Phase 1.
  static const int64_t modes[] = {0, 1, 0, 2, -1, INT64_MIN};
  const int64_t mode = kV2 ? modes[in.pick(6)] : 0;
  const bool null_ws = in.chance(6), null_ex = in.chance(6);
  uint64_t ws = kWorkspaceSentinel;
  aclOpExecutor* ex = kExecutorSentinel;
  const aclnnStatus s1 = phase1(c, handles.tensors, mode, null_ws ? nullptr : &ws, null_ex ? nullptr : &ex);
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
    if (t.present && !view_inside(arena.base, arena.bytes, arena.base + t.byte_offset, t.dtype, t.rank, t.shape,
                                  t.strides))
      inside = false;
  if (!inside) {
    if (!unguarded) fail("GetWorkspaceSize accepted a view outside its declared storage");
    MHC_FUZZ_CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "destroying an executor that did not run");
    return 0;
  }

  // Phase 2, with misuse first. None of it may write or consume the executor.
  const RunFn run = kRuns[kOp];
  if (in.chance(24)) {
    const int other = (kOp + 1 + int(in.pick(3))) % 4;
    std::vector<uint8_t> w(ws + 64);
    check_failed(kRuns[other](w.data(), ws, ex, nullptr), arena, "run through another operator");
    MHC_FUZZ_CHECK(std::string(aclGetRecentErrMsg()).find("belongs to") != std::string::npos, aclGetRecentErrMsg());
  }
  if (ws > 0 && in.chance(24)) check_failed(run(nullptr, ws, ex, nullptr), arena, "NULL workspace");
  if (ws > 0 && in.chance(24)) {
    std::vector<uint8_t> w(ws - 1);
    check_failed(run(w.data(), ws - 1, ex, nullptr), arena, "short workspace");
  }
  if (in.chance(16)) {
    aclrtStream dead = nullptr;
    MHC_FUZZ_CHECK(aclrtCreateStream(&dead) == ACL_SUCCESS && aclrtDestroyStream(dead) == ACL_SUCCESS, "streams");
    std::vector<uint8_t> w(ws + 64);
    check_failed(run(w.data(), ws, ex, dead), arena, "dead stream");
  }
  if (in.chance(16)) {  // destroyed instead of run: the run then finds no executor
    MHC_FUZZ_CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "destroying an executor that did not run");
    std::vector<uint8_t> w(ws + 64);
    check_failed(run(w.data(), ws, ex, nullptr), arena, "run after destroy");
    return 0;
  }
  if (in.chance(64)) handles.destroy();  // allowed: the executor holds no tensor

  // The run: a heap block of exactly what was asked (plus the shift), at any alignment.
  const size_t shift = in.pick(64);
  const uint64_t extra = in.chance(32) ? in.u8() : 0;
  uint8_t* block = static_cast<uint8_t*>(std::malloc(size_t(ws + extra + shift) + 1));
  MHC_FUZZ_CHECK(block != nullptr, "workspace allocation");
  void* workspace = ws + extra == 0 && in.flag() ? nullptr : block + shift;
  const aclnnStatus s2 = run(workspace, ws + extra, ex, nullptr);
  std::free(block);
  if (s2 != ACLNN_SUCCESS) fail(std::string(kNames[kOp]) + " failed after GetWorkspaceSize: " + aclGetRecentErrMsg());
  const Acceptance how{false, mode == 1 ? mhc::MatmulPrecision::hf32 : mhc::MatmulPrecision::fp32};
  if (kForward) check_accepted_forward(c, arena, !in.chance(128), how);
  else check_accepted_backward(c, arena, !in.chance(128), how);

  // The executor ran once: running or destroying it again is an error.
  const std::vector<uint8_t> after(arena.base, arena.base + arena.bytes);
  std::vector<uint8_t> w(ws + 64);
  const aclnnStatus again = in.flag() ? run(w.data(), ws, ex, nullptr) : aclDestroyAclOpExecutor(ex);
  MHC_FUZZ_CHECK(again == ACLNN_ERR_PARAM_INVALID, "second use of an executor");
  MHC_FUZZ_CHECK(std::memcmp(after.data(), arena.base, arena.bytes) == 0, "a second run wrote to the arena");
  return 0;
}
