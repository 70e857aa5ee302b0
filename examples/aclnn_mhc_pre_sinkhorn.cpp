// aclnnMhcPreSinkhorn sample, in the style of CANN's published aclnn samples:
// the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. CANN's fused MhcPre + MhcSinkhorn on x
// [bs=1, seq_len=1024, n=4, c=512] bf16, hcMult 4, 20 iterations, with the
// backward's caches (needBackward). Checks that hRes (flat [.., n*n]) is
// doubly stochastic (columns sum to 1, rows nearly so) and hPost lies in (0, 2).
#include <cmath>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
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
  const bool needBackward = true;
  Lcg rng{314};
  std::vector<uint16_t> xHost(T * K);
  for (auto& v : xHost) v = FloatToBf16(2.0f * rng.Next());
  std::vector<float> phiHost(F * K), alphaHost = {0.8f, 1.2f, 0.5f}, biasHost(F);
  for (auto& v : phiHost) v = 0.02f * rng.Next();
  for (auto& v : biasHost) v = 0.1f * rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {B, S, N, D}, aclDataType::ACL_BF16, xHost));
  inputs.push_back(MakeHost("phi", {F, K}, aclDataType::ACL_FLOAT, phiHost));
  inputs.push_back(MakeHost("alpha", {3}, aclDataType::ACL_FLOAT, alphaHost));
  inputs.push_back(MakeHost("bias", {F}, aclDataType::ACL_FLOAT, biasHost));
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
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. First phase: check the arguments, size the workspace. 4. Second phase: run, then wait.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPreSinkhornGetWorkspaceSize(inputs[0].tensor, inputs[1].tensor, inputs[2].tensor, inputs[3].tensor,
                                            hcMult, numIters, hcEps, normEps, needBackward, outputs[0].tensor,
                                            outputs[1].tensor, outputs[2].tensor, outputs[3].tensor,
                                            outputs[4].tensor, outputs[5].tensor, outputs[6].tensor,
                                            outputs[7].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPreSinkhornGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcPreSinkhorn, "aclnnMhcPreSinkhorn", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back, print their first values, check hRes and hPost.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  for (auto& t : outputs) PrintFirstValues(t, 4);
  double worstRow = 0.0, worstColumn = 0.0;
  bool inRange = true;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t i = 0; i < N; i++) {
      double row = 0.0, column = 0.0;
      for (int64_t j = 0; j < N; j++) {
        row += At(outputs[2], t * N * N + i * N + j);
        column += At(outputs[2], t * N * N + j * N + i);
      }
      worstRow = std::fmax(worstRow, std::fabs(row - 1.0));
      worstColumn = std::fmax(worstColumn, std::fabs(column - 1.0));
      const float post = At(outputs[1], t * N + i);
      inRange = inRange && post > 0.0f && post < 2.0f;
    }
  }
  LOG_PRINT("hRes: largest |column sum - 1|: %g, largest |row sum - 1|: %g\n", worstColumn, worstRow);
  const bool ok = worstColumn < 1e-5 && worstRow < 5e-2 && inRange;
  LOG_PRINT("%s\n", ok ? "check: PASSED" : "check: FAILED");

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return ok ? 0 : 1;
}
