// aclnnMhcPre sample, in the style of CANN's published aclnn samples: the same
// source builds against CANN on an Ascend NPU or against libmhc_aclnn on a CPU.
// T=1024 tokens, N=4 streams, D=512, bf16 x, gamma given, caches requested.
//
// Usage: aclnn_mhc_pre [dump.bin]   (with a path: also writes every input and
// output to it, which the tests compare with the C++ API bit for bit)
#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnn_sample.h"

int main(int argc, char** argv) {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs and outputs.
  const int64_t T = 1024, N = 4, D = 512, K = N * D, F = 2 * N + N * N;
  double normEps = 1e-6, hcEps = 1e-6;
  Lcg rng{2024};
  std::vector<uint16_t> xHost(T * K);
  for (auto& v : xHost) v = FloatToBf16(2.0f * rng.Next());
  std::vector<float> phiHost(F * K), alphaHost = {0.8f, 1.2f, 0.5f}, biasHost(F), gammaHost(N * D);
  for (auto& v : phiHost) v = 0.02f * rng.Next();
  for (auto& v : biasHost) v = 0.1f * rng.Next();
  for (auto& v : gammaHost) v = 1.0f + 0.1f * rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {T, N, D}, aclDataType::ACL_BF16, xHost));
  inputs.push_back(MakeHost("phi", {F, K}, aclDataType::ACL_FLOAT, phiHost));
  inputs.push_back(MakeHost("alpha", {3}, aclDataType::ACL_FLOAT, alphaHost));
  inputs.push_back(MakeHost("bias", {F}, aclDataType::ACL_FLOAT, biasHost));
  inputs.push_back(MakeHost("gamma", {N, D}, aclDataType::ACL_FLOAT, gammaHost));
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("hIn", {T, D}, aclDataType::ACL_BF16, std::vector<uint16_t>(T * D)));
  outputs.push_back(MakeHost("hPost", {T, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N)));
  outputs.push_back(MakeHost("hRes", {T, N, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N * N)));
  outputs.push_back(MakeHost("invRms", {T}, aclDataType::ACL_FLOAT, std::vector<float>(T)));
  outputs.push_back(MakeHost("hMix", {T, F}, aclDataType::ACL_FLOAT, std::vector<float>(T * F)));
  outputs.push_back(MakeHost("hPre", {T, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. First phase: check the arguments, size the workspace.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPreGetWorkspaceSize(inputs[0].tensor, inputs[1].tensor, inputs[2].tensor, inputs[3].tensor,
                                    inputs[4].tensor, normEps, hcEps, outputs[0].tensor, outputs[1].tensor,
                                    outputs[2].tensor, outputs[3].tensor, outputs[4].tensor, outputs[5].tensor,
                                    &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPreGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);

  // 4. Second phase: run on the stream, then wait for it.
  ret = RunOnStream(aclnnMhcPre, "aclnnMhcPre", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back and print their first values.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  for (auto& t : outputs) PrintFirstValues(t, 4);
  if (argc > 1) {
    const std::vector<SampleTensor> scalars = {
        MakeHost("normEps", {}, aclDataType::ACL_DOUBLE, std::vector<double>{normEps}),
        MakeHost("hcEps", {}, aclDataType::ACL_DOUBLE, std::vector<double>{hcEps})};
    ret = WriteDump(argv[1], {&scalars, &inputs, &outputs});
    CHECK_RET(ret == 0, return ret);
  }

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return 0;
}
