// aclOpExecutor: what the first phase of an aclnn operator hands to the second.
// It holds a copy of the validated problem (plain data: pointers to the
// caller's memory, dims, strides), so aclTensors may be destroyed before the
// run. It runs once: the run phase takes it out of the registry and frees it,
// so a second run finds no live handle and fails cleanly.
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "faces/aclnn/face.hpp"
#include "ops/call_resources.hpp"
#include "ops/post/post.hpp"
#include "ops/pre/backward.hpp"
#include "ops/pre/forward.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"
#include "ops/tensor_checks.hpp"

namespace mhc::faces::aclnn {
namespace {

// The core wants a 64-byte aligned workspace; CANN programs may hand any
// pointer (e.g. a slice of a pool), so we ask for this much more and align.
constexpr uint64_t kAlignmentSlack = 64;

struct Executor {
  const char* run_op;  // the only run call that may take this executor (a literal)
  Problem problem;
  size_t core_bytes = 0;     // what mhc::ops::pre_*::run needs
  uint64_t asked_bytes = 0;  // what the first phase reported
  int threads = 1;           // the first phase's count, which sized the workspace
};

HandleRegistry<Executor>& executors() {
  static HandleRegistry<Executor> registry;
  return registry;
}

std::string not_live_message(const char* op) {
  return std::string(op) + ": executor is not live: it has already run (an executor runs once), was destroyed, "
                           "or was not made by a GetWorkspaceSize call";
}

// The operator layer names tensors and scalars as the C++ API does (h_in); a CANN
// program knows them by CANN's parameter names. The description gives each
// operator's renames (MhcSinkhorn's z is x) and the common ones (h_in is hIn).
struct Rename {
  const char* own;
  const char* cann;
};
struct AclnnNames {
  std::vector<std::pair<std::string, std::vector<Rename>>> own;  // by CANN operator name ("aclnnMhcSinkhorn")
  std::vector<Rename> common;
};
const AclnnNames& aclnn_names() {
  static const AclnnNames table = [] {
    std::map<std::string, std::vector<Rename>> renames;
#define MHC_ACLNN_RENAME(own, cann) {#own, #cann},
#define MHC_ACLNN_NAMES(op, RENAMES) renames[#op] = {RENAMES(MHC_ACLNN_RENAME)};
#include "description/operators.def"
#undef MHC_ACLNN_NAMES
#undef MHC_ACLNN_RENAME
    AclnnNames t;
    t.common = renames["common"];
#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS) t.own.emplace_back(cann, renames[#name]);
#include "description/operators.def"
#undef MHC_OPERATOR
    return t;
  }();
  return table;
}

// `op` is an entry point (aclnnMhcPreV2GetWorkspaceSize): its operator is the
// described one whose CANN name is its longest prefix; nullptr when none is.
const std::vector<Rename>* own_names_of(const std::string& op) {
  const std::pair<std::string, std::vector<Rename>>* best = nullptr;
  for (const auto& entry : aclnn_names().own)
    if (op.rfind(entry.first, 0) == 0 && (best == nullptr || entry.first.size() > best->first.size())) best = &entry;
  return best != nullptr ? &best->second : nullptr;
}

std::string with_cann_names(const std::string& message, const char* op) {
  const std::vector<Rename>* own = own_names_of(op);
  auto rename = [&](const std::string& word) -> const char* {
    if (own == nullptr) return nullptr;
    for (const std::vector<Rename>* list : {own, &aclnn_names().common})
      for (const Rename& r : *list)
        if (word == r.own) return r.cann;
    return nullptr;
  };
  return ops::rename_words(message, rename);
}

// The operator layer's run of each kind of problem, at the thread count its
// workspace was sized for.
struct RunProblem {
  void* workspace;
  size_t bytes;
  int threads;
  Status operator()(const PreForward& p) const { return ops::pre::forward::run(*p.primitive, workspace, bytes); }
  Status operator()(const core::BackwardProblem& p) const {
    return ops::pre::backward::run(p, workspace, bytes, threads);
  }
  Status operator()(const SinkhornForward& p) const {
    return ops::sinkhorn::run_forward(p.problem, workspace, bytes, threads);
  }
  Status operator()(const SinkhornBackward& p) const {
    return ops::sinkhorn::run_backward(p.problem, workspace, bytes, threads);
  }
  Status operator()(const PostForward& p) const { return ops::post::run_forward(p.problem, workspace, bytes, threads); }
  Status operator()(const PostBackward& p) const {
    return ops::post::run_backward(p.problem, workspace, bytes, threads);
  }
  Status operator()(const ops::pre_sinkhorn::ForwardProblem& p) const {
    return ops::pre_sinkhorn::run_forward(p, workspace, bytes, threads);
  }
  Status operator()(const ops::pre_sinkhorn::BackwardProblem& p) const {
    return ops::pre_sinkhorn::run_backward(p, workspace, bytes, threads);
  }
  Status operator()(const NothingToRun&) const { return {}; }
};

}  // namespace

aclnnStatus from_status(const char* op, const Status& status) {
  if (status.ok()) return ACLNN_SUCCESS;
  return fail(static_cast<aclnnStatus>(status.code()), std::string(op) + ": " + with_cann_names(status.message(), op));
}

aclnnStatus create_executor(const char* run_op, Problem problem, size_t core_workspace_bytes,
                            uint64_t* workspace_size, aclOpExecutor** executor) {
  auto e = std::make_shared<Executor>();
  e->run_op = run_op;
  e->problem = std::move(problem);
  e->core_bytes = core_workspace_bytes;
  e->asked_bytes = core_workspace_bytes == 0 ? 0 : core_workspace_bytes + kAlignmentSlack;
  // The faces size the workspace at the first phase's default count (an MhcPre
  // primitive carries its own); a count changed before the run would not fit it.
  const auto* pre = std::get_if<PreForward>(&e->problem);
  e->threads = pre != nullptr ? pre->primitive->threads : ops::resolve_threads(0);
  const uint64_t asked = e->asked_bytes;
  *executor = as_handle<aclOpExecutor>(executors().add(std::move(e)));
  *workspace_size = asked;
  return ACLNN_SUCCESS;
}

aclnnStatus run_executor(const char* op, void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                         aclrtStream stream) {
  const std::string where = op;
  if (executor == nullptr) return fail(ACLNN_ERR_PARAM_NULLPTR, where + ": executor is NULL");
  std::shared_ptr<Executor> e = executors().find(handle_id(executor));
  if (!e) return fail(ACLNN_ERR_PARAM_INVALID, not_live_message(op));
  if (std::strcmp(e->run_op, op) != 0)
    return fail(ACLNN_ERR_PARAM_INVALID, where + ": executor belongs to " + e->run_op + ", not to " + op);
  if (workspace == nullptr && workspace_size != 0)
    return fail(ACLNN_ERR_PARAM_NULLPTR,
                where + ": workspace is NULL with workspaceSize " + std::to_string(workspace_size));
  if (workspace_size < e->asked_bytes)
    return fail(ACLNN_ERR_PARAM_INVALID, where + ": workspaceSize " + std::to_string(workspace_size) +
                                             " is smaller than the " + std::to_string(e->asked_bytes) +
                                             " bytes GetWorkspaceSize asked for");
  if (!stream_is_usable(stream))
    return fail(ACLNN_ERR_PARAM_INVALID, where + ": stream is not live (destroyed or never created)");
  // From here on the executor is consumed, whatever the run gives.
  if (!executors().take(handle_id(executor))) return fail(ACLNN_ERR_PARAM_INVALID, not_live_message(op));

  void* aligned = nullptr;
  if (e->core_bytes > 0) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(workspace);
    aligned = reinterpret_cast<void*>((base + kAlignmentSlack - 1) / kAlignmentSlack * kAlignmentSlack);
  }
  // The stream is synchronous: run now, on the calling thread and the pool.
  const Status status = std::visit(RunProblem{aligned, e->core_bytes, e->threads}, e->problem);
  return from_status(op, status);
}

}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  if (executor == nullptr) return ACLNN_SUCCESS;
  if (!executors().take(handle_id(executor)))
    return fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyAclOpExecutor: executor is not live: it has already run "
                                         "(running frees it) or was destroyed");
  return ACLNN_SUCCESS;
}
