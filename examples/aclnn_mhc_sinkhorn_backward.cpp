// aclnnMhcSinkhornBackward sample, in the style of CANN's published aclnn
// samples: the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. aclnnMhcSinkhorn (x [B=2, S=512, N=4, N=4] fp32, 20
// iterations) writes the caches, aclnnMhcSinkhornBackward reads them with a
// gradient of the output. Checks that every row of the gradient of x sums to
// 0 (the row softmax's Jacobian annihilates constants).
#include <cmath>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"
#include "aclnn_sample.h"

int main() {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs and outputs. The caches: the forward's outputs, the backward's inputs.
  const int64_t B = 2, S = 512, N = 4, Na = 8;
  const int64_t numIters = 20;
  const float eps = 1e-6f;
  Lcg rng{11};
  std::vector<float> xHost(B * S * N * N), gradHost(B * S * N * N);
  for (auto& v : xHost) v = 3.0f * rng.Next();
  for (auto& v : gradHost) v = rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {B, S, N, N}, aclDataType::ACL_FLOAT, xHost));
  inputs.push_back(MakeHost("gradOutput", {B, S, N, N}, aclDataType::ACL_FLOAT, gradHost));
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("output", {B, S, N, N}, aclDataType::ACL_FLOAT, std::vector<float>(B * S * N * N)));
  outputs.push_back(MakeHost("normOut", {2 * numIters, B, S, N, Na}, aclDataType::ACL_FLOAT,
                             std::vector<float>(2 * numIters * B * S * N * Na)));
  outputs.push_back(MakeHost("sumOut", {2 * numIters, B, S, Na}, aclDataType::ACL_FLOAT,
                             std::vector<float>(2 * numIters * B * S * Na)));
  outputs.push_back(MakeHost("out", {B, S, N, N}, aclDataType::ACL_FLOAT, std::vector<float>(B * S * N * N)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. The forward, with the caches.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcSinkhornGetWorkspaceSize(inputs[0].tensor, eps, numIters, outputs[0].tensor, outputs[1].tensor,
                                         outputs[2].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcSinkhornGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcSinkhorn, "aclnnMhcSinkhorn", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 4. The backward, from the caches.
  ret = aclnnMhcSinkhornBackwardGetWorkspaceSize(inputs[1].tensor, outputs[1].tensor, outputs[2].tensor,
                                                 outputs[3].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcSinkhornBackwardGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcSinkhornBackward, "aclnnMhcSinkhornBackward", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back, print the first gradient, check its row sums.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  std::vector<float> g(B * S * N * N);
  std::memcpy(g.data(), outputs[3].host.data(), outputs[3].host.size());
  for (int64_t i = 0; i < N; i++) {
    LOG_PRINT("out[0][0][%ld]:", static_cast<long>(i));
    for (int64_t j = 0; j < N; j++) LOG_PRINT(" %f", g[i * N + j]);
    LOG_PRINT("\n");
  }
  double worst = 0.0;
  bool finite = true;
  for (int64_t r = 0; r < B * S * N; r++) {
    double sum = 0.0;
    for (int64_t j = 0; j < N; j++) {
      sum += g[r * N + j];
      finite = finite && std::isfinite(g[r * N + j]);
    }
    worst = std::fmax(worst, std::fabs(sum));
  }
  LOG_PRINT("largest |row sum of out|: %g\n", worst);
  const bool ok = finite && worst < 1e-4;
  LOG_PRINT("%s\n", ok ? "row sums zero: PASSED" : "row sums zero: FAILED");

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return ok ? 0 : 1;
}
