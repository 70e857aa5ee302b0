// aclnnMhcPreSinkhornBackward sample, in the style of CANN's published aclnn
// samples: the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. aclnnMhcPreSinkhorn (x [bs=1, seq_len=1024, n=4,
// c=512] bf16, 20 iterations, needBackward) writes the caches,
// aclnnMhcPreSinkhornBackward reads them with gradients of hIn, hPost, hRes
// and gives gradX, gradPhi, gradAlpha, gradBias. Checks that they are finite
// and that gradBias's residual part sums to 0 per row of H (the Sinkhorn's
// row softmax annihilates constants).
#include <cmath>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "aclnn_sample.h"

int main() {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs and outputs, in CANN's shapes.
  const int64_t B = 1, S = 1024, N = 4, D = 512, T = B * S, K = N * D, F = 2 * N + N * N;
  const int64_t hcMult = N, numIters = 20;
  const double hcEps = 1e-6, normEps = 1e-6;
  Lcg rng{2718};
  std::vector<uint16_t> xHost(T * K), gradHinHost(T * D);
  for (auto& v : xHost) v = FloatToBf16(2.0f * rng.Next());
  for (auto& v : gradHinHost) v = FloatToBf16(rng.Next());
  std::vector<float> phiHost(F * K), alphaHost = {0.8f, 1.2f, 0.5f}, biasHost(F);
  std::vector<float> gradHPostHost(T * N), gradHResHost(T * N * N);
  for (auto& v : phiHost) v = 0.02f * rng.Next();
  for (auto& v : biasHost) v = 0.1f * rng.Next();
  for (auto& v : gradHPostHost) v = rng.Next();
  for (auto& v : gradHResHost) v = rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {B, S, N, D}, aclDataType::ACL_BF16, xHost));
  inputs.push_back(MakeHost("phi", {F, K}, aclDataType::ACL_FLOAT, phiHost));
  inputs.push_back(MakeHost("alpha", {3}, aclDataType::ACL_FLOAT, alphaHost));
  inputs.push_back(MakeHost("bias", {F}, aclDataType::ACL_FLOAT, biasHost));
  inputs.push_back(MakeHost("gradHin", {B, S, D}, aclDataType::ACL_BF16, gradHinHost));
  inputs.push_back(MakeHost("gradHPost", {B, S, N}, aclDataType::ACL_FLOAT, gradHPostHost));
  inputs.push_back(MakeHost("gradHRes", {B, S, N * N}, aclDataType::ACL_FLOAT, gradHResHost));
  // The forward's outputs; its caches (outputs[3..7]) are the backward's inputs.
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("hIn", {B, S, D}, aclDataType::ACL_BF16, std::vector<uint16_t>(T * D)));
  outputs.push_back(MakeHost("hPost", {B, S, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N)));
  outputs.push_back(MakeHost("hRes", {B, S, N * N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N * N)));
  outputs.push_back(MakeHost("hPre", {B, S, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N)));
  outputs.push_back(MakeHost("hcBeforeNorm", {B, S, F}, aclDataType::ACL_FLOAT, std::vector<float>(T * F)));
  outputs.push_back(MakeHost("invRms", {B, S, 1}, aclDataType::ACL_FLOAT, std::vector<float>(T)));
  outputs.push_back(MakeHost("sumOut", {2 * numIters, B, S, N}, aclDataType::ACL_FLOAT,
                             std::vector<float>(2 * numIters * T * N)));
  outputs.push_back(MakeHost("normOut", {2 * numIters, B, S, N, N}, aclDataType::ACL_FLOAT,
                             std::vector<float>(2 * numIters * T * N * N)));
  outputs.push_back(MakeHost("gradX", {B, S, N, D}, aclDataType::ACL_BF16, std::vector<uint16_t>(T * K)));
  outputs.push_back(MakeHost("gradPhi", {F, K}, aclDataType::ACL_FLOAT, std::vector<float>(F * K)));
  outputs.push_back(MakeHost("gradAlpha", {3}, aclDataType::ACL_FLOAT, std::vector<float>(3)));
  outputs.push_back(MakeHost("gradBias", {F}, aclDataType::ACL_FLOAT, std::vector<float>(F)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. The forward, with the caches.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPreSinkhornGetWorkspaceSize(inputs[0].tensor, inputs[1].tensor, inputs[2].tensor, inputs[3].tensor,
                                            hcMult, numIters, hcEps, normEps, true, outputs[0].tensor,
                                            outputs[1].tensor, outputs[2].tensor, outputs[3].tensor,
                                            outputs[4].tensor, outputs[5].tensor, outputs[6].tensor,
                                            outputs[7].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPreSinkhornGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcPreSinkhorn, "aclnnMhcPreSinkhorn", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 4. The backward, from the caches.
  ret = aclnnMhcPreSinkhornBackwardGetWorkspaceSize(inputs[4].tensor, inputs[5].tensor, inputs[6].tensor, inputs[0].tensor,
                                                    inputs[1].tensor, inputs[2].tensor, inputs[3].tensor,
                                                    outputs[3].tensor, outputs[4].tensor, outputs[5].tensor,
                                                    outputs[6].tensor, outputs[7].tensor, hcEps, outputs[8].tensor,
                                                    outputs[9].tensor, outputs[10].tensor, outputs[11].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPreSinkhornBackwardGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcPreSinkhornBackward, "aclnnMhcPreSinkhornBackward", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back, print the gradients' first values, check them.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  for (size_t o = 8; o < outputs.size(); o++) PrintFirstValues(outputs[o], 3);
  bool finite = true;
  for (size_t o = 8; o < outputs.size(); o++) {
    const int64_t count = GetShapeSize(outputs[o].shape);
    for (int64_t i = 0; i < count; i++) finite = finite && std::isfinite(At(outputs[o], i));
  }
  // gradBias's residual rows are the sums over tokens of grad z_res, whose rows each sum to 0.
  double worst = 0.0, magnitude = 0.0;
  for (int64_t i = 0; i < N; i++) {
    double sum = 0.0;
    for (int64_t j = 0; j < N; j++) {
      sum += At(outputs[11], 2 * N + i * N + j);
      magnitude = std::fmax(magnitude, std::fabs(At(outputs[11], 2 * N + i * N + j)));
    }
    worst = std::fmax(worst, std::fabs(sum));
  }
  LOG_PRINT("largest |row sum of gradBias's residual part|: %g (entries up to %g)\n", worst, magnitude);
  const bool ok = finite && worst <= 1e-4 * (magnitude + 1.0);
  LOG_PRINT("%s\n", ok ? "check: PASSED" : "check: FAILED");

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return ok ? 0 : 1;
}
