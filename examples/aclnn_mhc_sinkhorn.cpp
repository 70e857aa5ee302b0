// aclnnMhcSinkhorn sample, in the style of CANN's published aclnn samples: the
// same source builds against CANN on an Ascend NPU or against libmhc_aclnn on
// a CPU. x [T=1024, N=4, N=4] fp32 (MhcPre's h_res logits), 20 iterations,
// the backward's caches requested (2*I*T*N*8 and 2*I*T*8 floats). Checks that
// every output matrix is doubly stochastic: its columns (the last step's)
// sum to 1, its rows nearly so after 20 iterations.
#include <cmath>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnn_sample.h"

int main() {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs and outputs. The caches: 2*numIters steps of the library's layout (Na = 8 for N <= 8).
  const int64_t T = 1024, N = 4, Na = 8;
  const int64_t numIters = 20;
  const float eps = 1e-6f;
  Lcg rng{7};
  std::vector<float> xHost(T * N * N);
  for (auto& v : xHost) v = 3.0f * rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("x", {T, N, N}, aclDataType::ACL_FLOAT, xHost));
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("output", {T, N, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N * N)));
  outputs.push_back(MakeHost("normOut", {2 * numIters, T, N, Na}, aclDataType::ACL_FLOAT,
                             std::vector<float>(2 * numIters * T * N * Na)));
  outputs.push_back(MakeHost("sumOut", {2 * numIters, T, Na}, aclDataType::ACL_FLOAT,
                             std::vector<float>(2 * numIters * T * Na)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. First phase: check the arguments, size the workspace.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcSinkhornGetWorkspaceSize(inputs[0].tensor, eps, numIters, outputs[0].tensor, outputs[1].tensor,
                                         outputs[2].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcSinkhornGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);

  // 4. Second phase: run on the stream, then wait for it.
  ret = RunOnStream(aclnnMhcSinkhorn, "aclnnMhcSinkhorn", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back, print the first matrix, check the row and column sums.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  std::vector<float> h(T * N * N);
  std::memcpy(h.data(), outputs[0].host.data(), outputs[0].host.size());
  for (int64_t i = 0; i < N; i++) {
    LOG_PRINT("output[0][%ld]:", static_cast<long>(i));
    for (int64_t j = 0; j < N; j++) LOG_PRINT(" %f", h[i * N + j]);
    LOG_PRINT("\n");
  }
  double worstRow = 0.0, worstColumn = 0.0;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t i = 0; i < N; i++) {
      double row = 0.0, column = 0.0;
      for (int64_t j = 0; j < N; j++) {
        row += h[(t * N + i) * N + j];
        column += h[(t * N + j) * N + i];
      }
      worstRow = std::fmax(worstRow, std::fabs(row - 1.0));
      worstColumn = std::fmax(worstColumn, std::fabs(column - 1.0));
    }
  }
  LOG_PRINT("largest |column sum - 1|: %g, largest |row sum - 1|: %g\n", worstColumn, worstRow);
  const bool ok = worstColumn < 1e-5 && worstRow < 5e-2;
  LOG_PRINT("%s\n", ok ? "doubly stochastic: PASSED" : "doubly stochastic: FAILED");

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return ok ? 0 : 1;
}
