// aclnnMhcPreBackward sample, in the style of CANN's published aclnn samples:
// the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. T=1024 tokens, N=4 streams, D=512, bf16 x, gamma and
// gradXPost given.
//
// Usage: aclnn_mhc_pre_backward [dump.bin]   (with a path: also writes every input and
// output to it, which the tests compare with the C++ API bit for bit)
#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "aclnn_sample.h"

int main(int argc, char** argv) {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs (the forward's caches are made up here, in their usual ranges) and outputs.
  const int64_t T = 1024, N = 4, D = 512, K = N * D, F = 2 * N + N * N;
  float hcEps = 1e-6f;
  Lcg rng{2025};
  auto bf16Values = [&rng](int64_t count, float scale) {
    std::vector<uint16_t> v(count);
    for (auto& e : v) e = FloatToBf16(scale * rng.Next());
    return v;
  };
  auto floatValues = [&rng](int64_t count, float center, float scale) {
    std::vector<float> v(count);
    for (auto& e : v) e = center + scale * rng.Next();
    return v;
  };
  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {T, N, D}, aclDataType::ACL_BF16, bf16Values(T * K, 2.0f)));
  inputs.push_back(MakeHost("phi", {F, K}, aclDataType::ACL_FLOAT, floatValues(F * K, 0.0f, 0.02f)));
  inputs.push_back(MakeHost("alpha", {3}, aclDataType::ACL_FLOAT, std::vector<float>{0.8f, 1.2f, 0.5f}));
  inputs.push_back(MakeHost("gradHIn", {T, D}, aclDataType::ACL_BF16, bf16Values(T * D, 1.0f)));
  inputs.push_back(MakeHost("gradHPost", {T, N}, aclDataType::ACL_FLOAT, floatValues(T * N, 0.0f, 1.0f)));
  inputs.push_back(MakeHost("gradHRes", {T, N, N}, aclDataType::ACL_FLOAT, floatValues(T * N * N, 0.0f, 1.0f)));
  inputs.push_back(MakeHost("invRms", {T}, aclDataType::ACL_FLOAT, floatValues(T, 0.8f, 0.1f)));
  inputs.push_back(MakeHost("hMix", {T, F}, aclDataType::ACL_FLOAT, floatValues(T * F, 0.0f, 0.5f)));
  inputs.push_back(MakeHost("hPre", {T, N}, aclDataType::ACL_FLOAT, floatValues(T * N, 0.5f + hcEps, 0.4f)));
  inputs.push_back(MakeHost("hPost", {T, N}, aclDataType::ACL_FLOAT, floatValues(T * N, 1.0f, 0.8f)));
  inputs.push_back(MakeHost("gamma", {N, D}, aclDataType::ACL_FLOAT, floatValues(N * D, 1.0f, 0.1f)));
  inputs.push_back(MakeHost("gradXPost", {T, N, D}, aclDataType::ACL_BF16, bf16Values(T * K, 0.5f)));
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("gradX", {T, N, D}, aclDataType::ACL_BF16, std::vector<uint16_t>(T * K)));
  outputs.push_back(MakeHost("gradPhi", {F, K}, aclDataType::ACL_FLOAT, std::vector<float>(F * K)));
  outputs.push_back(MakeHost("gradAlpha", {3}, aclDataType::ACL_FLOAT, std::vector<float>(3)));
  outputs.push_back(MakeHost("gradBias", {F}, aclDataType::ACL_FLOAT, std::vector<float>(F)));
  outputs.push_back(MakeHost("gradGamma", {N, D}, aclDataType::ACL_FLOAT, std::vector<float>(N * D)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. First phase: check the arguments, size the workspace.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  std::vector<aclTensor*> in;
  for (auto& t : inputs) in.push_back(t.tensor);
  ret = aclnnMhcPreBackwardGetWorkspaceSize(in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9],
                                            in[10], in[11], hcEps, outputs[0].tensor, outputs[1].tensor,
                                            outputs[2].tensor, outputs[3].tensor, outputs[4].tensor,
                                            &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPreBackwardGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);

  // 4. Second phase: run on the stream, then wait for it.
  ret = RunOnStream(aclnnMhcPreBackward, "aclnnMhcPreBackward", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back and print their first values.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  for (auto& t : outputs) PrintFirstValues(t, 4);
  if (argc > 1) {
    const std::vector<SampleTensor> scalars = {
        MakeHost("hcEps", {}, aclDataType::ACL_FLOAT, std::vector<float>{hcEps})};
    ret = WriteDump(argv[1], {&scalars, &inputs, &outputs});
    CHECK_RET(ret == 0, return ret);
  }

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return 0;
}
