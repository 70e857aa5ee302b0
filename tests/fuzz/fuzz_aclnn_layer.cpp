// libFuzzer targets of the aclnn face's layer operators: GetWorkspaceSize + run of
// one operator (MHC_FUZZ_ACLNN_LAYER_OP: 0 aclnnMhcSinkhorn, 1 aclnnMhcSinkhornBackward,
// 2 aclnnMhcPost, 3 aclnnMhcPostBackward, 4 aclnnMhcPreSinkhorn,
// 5 aclnnMhcPreSinkhornBackward); see fuzz_aclnn_layer.hpp.
#include "fuzz_aclnn_layer.hpp"

#ifndef MHC_FUZZ_ACLNN_LAYER_OP
#error "define MHC_FUZZ_ACLNN_LAYER_OP (0..5)"
#endif
static_assert(MHC_FUZZ_ACLNN_LAYER_OP >= 0 && MHC_FUZZ_ACLNN_LAYER_OP <= 5, "MHC_FUZZ_ACLNN_LAYER_OP is 0..5");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mhc_fuzz::run_aclnn_layer_target(data, size, mhc_fuzz::AclLayerOp(MHC_FUZZ_ACLNN_LAYER_OP));
  return 0;
}
