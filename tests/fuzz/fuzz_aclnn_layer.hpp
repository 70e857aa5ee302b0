// The aclnn face's layer targets (docs/reliability.md, "Fuzzing"): GetWorkspaceSize
// + run of aclnnMhcSinkhorn, aclnnMhcSinkhornBackward, aclnnMhcPost,
// aclnnMhcPostBackward, aclnnMhcPreSinkhorn or aclnnMhcPreSinkhornBackward
// (fuzz_aclnn_layer.cpp, MHC_FUZZ_ACLNN_LAYER_OP 0..5), as fuzz_aclnn.cpp does
// for MhcPre: aclTensors of any dims, strides, offset, storage, dtype and format
// over one arena (fuzz_common's lay_out in its aclnn mode), the scalars among
// their edge values (eps, numIters 0, -1, 101, huge; hcMult wrong; needBackward
// both ways), the caches' element counts and shapes right and wrong, and the run
// phase misused on purpose.
//
// The checks, every input:
//   - rejected: 161001 or 161002 with a message; not one arena byte changed;
//     *workspaceSize and *executor not written; and the call was not nominal
//     (every tensor as its slot says, in a layout the face takes, every scalar
//     within the rules: such a call must be accepted);
//   - accepted: it keeps the rules the face documents (numIters in [1, 100],
//     hcMult = N, the caches' counts, forms and layout, needBackward's caches,
//     dtypes, the empty cases); phase 1 wrote nothing; a view it reads or writes
//     lies in its declared storage; the run writes only the output elements
//     (nothing at all for CANN's "nothing run" cases, whose workspace is 0); and
//     those elements have the bits the C++ API gives on a copy of the arena at
//     another address with another thread count (NaN where NaN);
//   - the run phase: misuse (another operator's run, NULL or short workspace,
//     dead stream, destroyed instead of run) is an error that neither writes
//     nor consumes the executor; a second run or destroy is 161002.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "fuzz_common.hpp"

namespace mhc_fuzz {

enum class AclLayerOp { sinkhorn, sinkhorn_backward, post, post_backward, pre_sinkhorn, pre_sinkhorn_backward };
void run_aclnn_layer_target(const uint8_t* data, size_t size, AclLayerOp op);

namespace aclnn_layer {

// ------------------------------------------------------------------ any aclnn target

using RunFn = aclnnStatus (*)(void*, uint64_t, aclOpExecutor*, aclrtStream);
// Every run phase of the face (the four MhcPre ones, then the six of AclLayerOp's order).
inline constexpr int kRunCount = 10;
extern const RunFn kRuns[kRunCount];
extern const char* const kRunNames[kRunCount];
inline int run_index(AclLayerOp op) { return 4 + int(op); }

// A failed call: 161001 or 161002, a message, and not one arena byte changed.
void check_failed(aclnnStatus status, const Arena& arena, const std::string& what);

// The case's aclTensors over the arena. A view may leave the arena only when its
// tensor declares no storage (the library cannot know): `unguarded` marks those.
struct AclTensors {
  std::vector<aclTensor*> handles;  // NULL: absent (or aclCreateTensor refused it)
  std::vector<bool> unguarded;
  bool destroyed = false;
  AclTensors() = default;
  AclTensors(const AclTensors&) = delete;
  AclTensors& operator=(const AclTensors&) = delete;
  ~AclTensors() { destroy(); }
  void create(Bytes& in, Case& c, const Arena& arena);
  void destroy();
  bool live(size_t i) const { return handles[i] != nullptr; }
};

// Where the aclTensor's data pointer points (relative to the arena's start):
// false when its view offset is not one the harness placed (then the view's
// memory is unknown to it).
bool plain_offset(const Tensor& t);
// The view lies in the arena where the harness placed it (a plain offset).
bool inside_arena(const Tensor& t, const Arena& arena);

// The run phase after a successful GetWorkspaceSize: misuse first (none of it
// may write or consume the executor), then the run with a heap workspace of
// exactly the size asked at any alignment. False: the executor was destroyed
// instead of run (nothing more to check). The other operator run through the
// executor is one of kRuns[0, among) (self among them).
bool run_phase(Bytes& in, const Arena& arena, int self, int among, uint64_t ws, aclOpExecutor* ex,
               AclTensors& tensors);
// After the run: a second run or destroy is 161002 and writes nothing.
void check_second_use(Bytes& in, const Arena& arena, int self, uint64_t ws, aclOpExecutor* ex);

// ------------------------------------------------------------------ the layer's calls

struct LayerCall {
  AclLayerOp op = AclLayerOp::sinkhorn;
  Case c;                      // the tensors, in the operator's argument order (CANN's names)
  std::vector<int> mutations;  // per tensor, from lay_out
  std::vector<bool> cache;     // per tensor: a cache whose layout must be contiguous
  float eps = 1e-6f;           // MhcSinkhorn
  int64_t num_iters = 3;       // MhcSinkhorn, MhcPreSinkhorn
  int64_t hc_mult = 4;         // MhcPreSinkhorn
  double hc_eps = 1e-6, norm_eps = 1e-6;
  bool need_backward = true;   // MhcPreSinkhorn
  bool plan_valid = true;      // scalars, dtypes, presence and cache forms the face accepts
  std::string plan;            // the scalars and the cache form, for messages
  int threads = 1;             // of the C++ API's run
  int index(const char* name) const;
  Tensor& at(const char* name) { return c.tensors[size_t(index(name))]; }
  const Tensor& at(const char* name) const { return c.tensors[size_t(index(name))]; }
};

// What the face's rules say of a call, from the tensors as created.
struct Expectation {
  std::string broken;         // a rule an accepted call must keep and this one breaks
  bool nominal = false;       // it must be accepted
  bool nothing_run = false;   // accepted, CANN's empty case: nothing written
  std::vector<bool> used;     // the tensors the face translates into views
  std::vector<bool> written;  // the outputs it writes
  std::vector<bool> ignored;  // the tensors it never looks at (a destroyed one is no error)
};

LayerCall generate_call(Bytes& in, AclLayerOp op);
aclnnStatus get_workspace(const LayerCall& call, const AclTensors& tensors, uint64_t* ws, aclOpExecutor** ex);
Expectation expect(const LayerCall& call, const AclTensors& tensors, const Arena& arena);
// The same call through the C++ API (the operator layer without eps checks where
// the scalars are outside the C++ API's rules, as the face validates) on `copy`,
// an arena of the case's layout; fails the target when it rejects the call.
void run_cpp(const LayerCall& call, uint8_t* copy);

// Helpers of the rules.
// The caches' pitch Na = 8*ceil(N/8), saturated (N is any dim of a rejected call).
inline int64_t pitch_of(int64_t N) { return N > INT64_MAX - 7 ? INT64_MAX : (N + 7) / 8 * 8; }
std::vector<int64_t> dims_of(const Tensor& t);
int64_t count_of(const std::vector<int64_t>& dims);  // saturated at INT64_MAX
bool contiguous_view(const Tensor& t);               // extent-1 dims aside
bool nominal_tensor(const LayerCall& call, size_t i, const AclTensors& tensors, const Arena& arena);

}  // namespace aclnn_layer
}  // namespace mhc_fuzz
