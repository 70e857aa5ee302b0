// The reference family's kernel tables: SPEC in float64 (reference.hpp), on
// the calling thread.
#include "kernels/reference/reference.hpp"
#include "kernels/tables.hpp"

namespace mhc::kernels::reference {
namespace {

int64_t no_floats(const PreShape&) { return 0; }
void forward_tokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  pre_forward_tokens(*item.operands, t0, t1);
}

}  // namespace

const PreForwardKernels kPreForward = {.scratch_floats = no_floats, .tokens = forward_tokens, .serial = true};
const PreBackwardKernels kPreBackward = {.scratch_floats = no_floats, .serial = pre_backward};

}  // namespace mhc::kernels::reference
