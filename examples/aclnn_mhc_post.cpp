// aclnnMhcPost sample, in the style of CANN's published aclnn samples: the
// same source builds against CANN on an Ascend NPU or against libmhc_aclnn on
// a CPU. x [B=2, S=256, N=4, D=512] bf16, hRes [B,S,N,N], hOut [B,S,D] bf16,
// hPost [B,S,N]: out[j] = hPost[j] hOut + sum_i hRes[i,j] x[i] (hRes
// transposed). Checks every output against a double-precision computation.
#include <cmath>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_post.h"
#include "aclnn_sample.h"

int main() {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs and outputs.
  const int64_t B = 2, S = 256, N = 4, D = 512, T = B * S;
  Lcg rng{2025};
  std::vector<uint16_t> xHost(T * N * D), hOutHost(T * D);
  std::vector<float> hResHost(T * N * N), hPostHost(T * N);
  for (auto& v : xHost) v = FloatToBf16(2.0f * rng.Next());
  for (auto& v : hOutHost) v = FloatToBf16(rng.Next());
  for (auto& v : hResHost) v = 0.25f + 0.2f * rng.Next();
  for (auto& v : hPostHost) v = 1.0f + 0.8f * rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {B, S, N, D}, aclDataType::ACL_BF16, xHost));
  inputs.push_back(MakeHost("hRes", {B, S, N, N}, aclDataType::ACL_FLOAT, hResHost));
  inputs.push_back(MakeHost("hOut", {B, S, D}, aclDataType::ACL_BF16, hOutHost));
  inputs.push_back(MakeHost("hPost", {B, S, N}, aclDataType::ACL_FLOAT, hPostHost));
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("out", {B, S, N, D}, aclDataType::ACL_BF16, std::vector<uint16_t>(T * N * D)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. First phase: check the arguments, size the workspace. 4. Second phase: run, then wait.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPostGetWorkspaceSize(inputs[0].tensor, inputs[1].tensor, inputs[2].tensor, inputs[3].tensor,
                                     outputs[0].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPostGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcPost, "aclnnMhcPost", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the output back, print its first values, check it.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  PrintFirstValues(outputs[0], 4);
  int64_t wrong = 0;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t j = 0; j < N; j++) {
      for (int64_t d = 0; d < D; d++) {
        double want = double(hPostHost[t * N + j]) * At(inputs[2], t * D + d);
        for (int64_t i = 0; i < N; i++) want += double(hResHost[(t * N + i) * N + j]) * At(inputs[0], (t * N + i) * D + d);
        const double got = At(outputs[0], (t * N + j) * D + d);
        if (std::fabs(got - want) > std::fabs(want) / 128 + 1e-6) wrong++;
      }
    }
  }
  LOG_PRINT("%ld of %ld values outside bf16 rounding of the double result\n", static_cast<long>(wrong),
            static_cast<long>(T * N * D));
  const bool ok = wrong == 0;
  LOG_PRINT("%s\n", ok ? "check: PASSED" : "check: FAILED");

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return ok ? 0 : 1;
}
