// The aclnn layer targets' harness (fuzz_aclnn_layer.hpp): aclTensors over the
// arena, the run phase and its misuse, and one input's flow from generation to
// the checks. The operators' own parts are in fuzz_aclnn_layer_ops.cpp.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "aclnnop/aclnn_mhc_post.h"
#include "aclnnop/aclnn_mhc_post_backward.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnnop/aclnn_mhc_pre_backward_v2.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "aclnnop/aclnn_mhc_pre_v2.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "fuzz_aclnn_layer.hpp"

namespace mhc_fuzz {
namespace aclnn_layer {

const RunFn kRuns[kRunCount] = {aclnnMhcPre,         aclnnMhcPreV2,        aclnnMhcPreBackward,
                                aclnnMhcPreBackwardV2, aclnnMhcSinkhorn,   aclnnMhcSinkhornBackward,
                                aclnnMhcPost,        aclnnMhcPostBackward, aclnnMhcPreSinkhorn,
                                aclnnMhcPreSinkhornBackward};
const char* const kRunNames[kRunCount] = {"aclnnMhcPre",         "aclnnMhcPreV2",        "aclnnMhcPreBackward",
                                          "aclnnMhcPreBackwardV2", "aclnnMhcSinkhorn",   "aclnnMhcSinkhornBackward",
                                          "aclnnMhcPost",        "aclnnMhcPostBackward", "aclnnMhcPreSinkhorn",
                                          "aclnnMhcPreSinkhornBackward"};

namespace {

constexpr size_t kSteeringBytes = 16;
aclOpExecutor* const kExecutorSentinel = reinterpret_cast<aclOpExecutor*>(uintptr_t(0x5E5E5E40));
constexpr uint64_t kWorkspaceSentinel = 0xDEADBEEFull;

int64_t acl_esize(int32_t acl_dtype) { return acl_dtype == 0 ? 4 : 2; }  // the valid ones only matter

}  // namespace

bool inside_arena(const Tensor& t, const Arena& arena) {
  return plain_offset(t) &&
         view_inside(arena.base, arena.bytes, arena.base + t.byte_offset, t.dtype, t.rank, t.shape, t.strides);
}

void check_failed(aclnnStatus status, const Arena& arena, const std::string& what) {
  if (status != ACLNN_ERR_PARAM_NULLPTR && status != ACLNN_ERR_PARAM_INVALID)
    fail(what + ": unexpected code " + std::to_string(status) + ": " + aclGetRecentErrMsg());
  MHC_FUZZ_CHECK(aclGetRecentErrMsg()[0] != '\0', what + ": an error without a message");
  MHC_FUZZ_CHECK(arena.unchanged(), what + ": a failed call wrote to the arena");
}

bool plain_offset(const Tensor& t) { return t.acl_offset >= 0 && t.acl_offset <= 3; }

void AclTensors::create(Bytes& in, Case& c, const Arena& arena) {
  handles.assign(c.tensors.size(), nullptr);
  unguarded.assign(c.tensors.size(), false);
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    Tensor& t = c.tensors[i];
    if (!t.present) continue;
    const int64_t esize = acl_esize(t.acl_dtype);
    const int64_t base = plain_offset(t) ? t.byte_offset - t.acl_offset * esize : t.byte_offset;
    const bool fits = element_size_of(t.dtype) != 0 && inside_arena(t, arena);
    if (!t.storage_given && !fits) {
      if (in.flag()) t.storage_given = true;
      else unguarded[i] = true;
    }
    // Storage dims that reach past the arena (a huge count that does not
    // overflow, as {INT64_MAX, 1}) guard nothing either.
    int64_t storage = 1;
    bool counted = true;
    for (int64_t d : t.storage) counted = counted && d > 0 && !__builtin_mul_overflow(storage, d, &storage);
    if (t.storage_given && counted && (base < 0 || storage > (int64_t(arena.bytes) - base) / esize)) unguarded[i] = true;
    handles[i] = aclCreateTensor(
        t.shape, uint64_t(t.rank), aclDataType(t.acl_dtype), t.strides_given ? t.strides : nullptr, t.acl_offset,
        aclFormat(t.format), t.storage_given ? t.storage.data() : nullptr, t.storage_given ? t.storage.size() : 0,
        t.null_data ? nullptr : arena.base + base);
    if (handles[i] == nullptr) {
      MHC_FUZZ_CHECK(aclGetRecentErrMsg()[0] != '\0', "aclCreateTensor failed without a message");
      t.present = false;
    }
  }
}

void AclTensors::destroy() {
  if (destroyed) return;
  for (aclTensor* t : handles)
    if (t != nullptr) MHC_FUZZ_CHECK(aclDestroyTensor(t) == ACLNN_SUCCESS, "aclDestroyTensor of a live tensor");
  destroyed = true;
}

bool run_phase(Bytes& in, const Arena& arena, int self, int among, uint64_t ws, aclOpExecutor* ex,
               AclTensors& tensors) {
  const RunFn run = kRuns[self];
  if (in.chance(24)) {
    const int other = (self + 1 + int(in.pick(among - 1))) % among;
    std::vector<uint8_t> w(ws + 64);
    check_failed(kRuns[other](w.data(), ws, ex, nullptr), arena, std::string("run through ") + kRunNames[other]);
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
    return false;
  }
  if (in.chance(64)) tensors.destroy();  // allowed: the executor holds no tensor

  // The run: a heap block of exactly what was asked (plus the shift), at any alignment.
  const size_t shift = in.pick(64);
  const uint64_t extra = in.chance(32) ? in.u8() : 0;
  uint8_t* block = static_cast<uint8_t*>(std::malloc(size_t(ws + extra + shift) + 1));
  MHC_FUZZ_CHECK(block != nullptr, "workspace allocation");
  void* workspace = ws + extra == 0 && in.flag() ? nullptr : block + shift;
  const aclnnStatus s = run(workspace, ws + extra, ex, nullptr);
  std::free(block);
  if (s != ACLNN_SUCCESS) fail(std::string(kRunNames[self]) + " failed after GetWorkspaceSize: " + aclGetRecentErrMsg());
  return true;
}

int LayerCall::index(const char* name) const {
  for (size_t i = 0; i < c.tensors.size(); ++i)
    if (std::strcmp(c.tensors[i].name, name) == 0) return int(i);
  fail(std::string("no slot ") + name);
}

void check_second_use(Bytes& in, const Arena& arena, int self, uint64_t ws, aclOpExecutor* ex) {
  const std::vector<uint8_t> after(arena.base, arena.base + arena.bytes);
  std::vector<uint8_t> w(ws + 64);
  const aclnnStatus again = in.flag() ? kRuns[self](w.data(), ws, ex, nullptr) : aclDestroyAclOpExecutor(ex);
  MHC_FUZZ_CHECK(again == ACLNN_ERR_PARAM_INVALID, "second use of an executor");
  MHC_FUZZ_CHECK(arena.bytes == 0 || std::memcmp(after.data(), arena.base, arena.bytes) == 0,
                 "a second run wrote to the arena");
}

}  // namespace aclnn_layer

// ------------------------------------------------------------------ one input

void run_aclnn_layer_target(const uint8_t* data, size_t size, AclLayerOp op) {
  using namespace aclnn_layer;
  // The first bytes steer the harness (threads, misuse of both phases), the rest
  // make the call: an input of any length reaches every kind of misuse.
  const size_t steering = size < kSteeringBytes ? size : kSteeringBytes;
  Bytes ctl(data, steering), in(data + steering, size - steering);
  LayerCall call = generate_call(in, op);
  describe(call.c);
  describe_more(call.plan);
  Arena arena(call.c);
  AclTensors tensors;
  tensors.create(in, call.c, arena);
  const int self = run_index(op);
  const std::string name = kRunNames[self];
  static const int threads[] = {1, 3, 2, 0};
  call.threads = threads[ctl.pick(4)];

  // A destroyed handle passed to phase 1 is an error, not a use after free
  // (unless the face never looks at that tensor), also where nothing is run.
  if (ctl.chance(8)) {
    const Expectation before = expect(call, tensors, arena);
    const size_t i = ctl.pick(call.c.tensors.size());
    if (tensors.live(i) && !before.ignored[i]) {
      MHC_FUZZ_CHECK(aclDestroyTensor(tensors.handles[i]) == ACLNN_SUCCESS, "aclDestroyTensor");
      MHC_FUZZ_CHECK(aclDestroyTensor(tensors.handles[i]) == ACLNN_ERR_PARAM_INVALID, "aclDestroyTensor twice");
      uint64_t ws = kWorkspaceSentinel;
      aclOpExecutor* ex = kExecutorSentinel;
      const aclnnStatus s = get_workspace(call, tensors, &ws, &ex);
      if (s == ACLNN_SUCCESS) {
        MHC_FUZZ_CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "destroying an executor that did not run");
        fail(name + "GetWorkspaceSize accepted a destroyed aclTensor as " + call.c.tensors[i].name);
      }
      check_failed(s, arena, name + "GetWorkspaceSize with " + call.c.tensors[i].name + " destroyed");
      MHC_FUZZ_CHECK(ws == kWorkspaceSentinel && ex == kExecutorSentinel, "a failed GetWorkspaceSize wrote its results");
      tensors.handles[i] = nullptr;
      return;
    }
  }

  // Phase 1.
  const bool null_ws = ctl.chance(6), null_ex = ctl.chance(6);
  uint64_t ws = kWorkspaceSentinel;
  aclOpExecutor* ex = kExecutorSentinel;
  const aclnnStatus s1 = get_workspace(call, tensors, null_ws ? nullptr : &ws, null_ex ? nullptr : &ex);
  const Expectation e = expect(call, tensors, arena);
  if (s1 != ACLNN_SUCCESS) {
    const std::string message = aclGetRecentErrMsg();
    check_failed(s1, arena, name + "GetWorkspaceSize");
    MHC_FUZZ_CHECK(ws == kWorkspaceSentinel && ex == kExecutorSentinel, "a failed GetWorkspaceSize wrote its results");
    if (e.nominal && !null_ws && !null_ex) fail(name + "GetWorkspaceSize rejected a nominal call: " + message);
    return;
  }
  MHC_FUZZ_CHECK(!null_ws && !null_ex, "GetWorkspaceSize accepted a NULL workspaceSize or executor");
  MHC_FUZZ_CHECK(ex != nullptr && ex != kExecutorSentinel && ws != kWorkspaceSentinel, "GetWorkspaceSize results");
  if (!e.broken.empty()) fail(name + "GetWorkspaceSize accepted a call against the rules: " + e.broken);
  MHC_FUZZ_CHECK(arena.unchanged(), "GetWorkspaceSize wrote to the arena");
  if (e.nothing_run) {
    MHC_FUZZ_CHECK(ws == 0, "an empty call (nothing run) asked for a workspace");
  } else {
    bool stop = false;
    for (size_t i = 0; i < call.c.tensors.size(); ++i) {
      if (!e.used[i] || inside_arena(call.c.tensors[i], arena)) continue;
      if (!tensors.unguarded[i])
        fail(name + "GetWorkspaceSize accepted a view outside its declared storage: " + call.c.tensors[i].name);
      stop = true;  // declared without storage: the library cannot know; not run
    }
    if (stop) {
      MHC_FUZZ_CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "destroying an executor that did not run");
      return;
    }
  }

  // Phase 2, then the checks of what it wrote.
  if (!run_phase(ctl, arena, self, kRunCount, ws, ex, tensors)) return;
  for (size_t i = 0; i < call.c.tensors.size(); ++i) call.c.tensors[i].output = e.written[i];
  check_only_outputs_written(call.c, arena, arena.base, name.c_str());
  if (!e.nothing_run) {
    // The C++ API on a copy of the arena as it was, at another address (another
    // alignment modulo 64), with 1, 3, 2 or the default number of threads.
    std::vector<uint8_t> shifted(arena.bytes + 64 + 48);
    uint8_t* sb = shifted.data() + 16;
    while ((reinterpret_cast<uintptr_t>(sb) - reinterpret_cast<uintptr_t>(arena.base)) % 64 == 0) sb += 16;
    if (arena.bytes > 0) std::memcpy(sb, arena.pristine.data(), arena.bytes);
    run_cpp(call, sb);
    check_outputs_equal(call.c, arena.base, sb, name + " differs from the C++ API (num_threads " +
                                                    std::to_string(call.threads) + ")");
  }
  check_second_use(ctl, arena, self, ws, ex);
}

}  // namespace mhc_fuzz
