// aclnnMhcPostBackward sample, in the style of CANN's published aclnn
// samples: the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. gradOutput and x [T=1024, N=4, D=512] fp16 (as
// aclFloat16), hRes [T,N,N], hOut [T,D] fp16, hPost [T,N]; gradX, gradHRes,
// gradHOut, gradHPost. Checks every output against a double-precision
// computation.
#include <cmath>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_post_backward.h"
#include "aclnn_sample.h"

int main() {
  // 1. Device, context, stream.
  int32_t deviceId = 0;
  aclrtContext context;
  aclrtStream stream;
  auto ret = Init(deviceId, &context, &stream);
  CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. Inputs and outputs.
  const int64_t T = 1024, N = 4, D = 512;
  Lcg rng{99};
  std::vector<aclFloat16> gradHost(T * N * D), xHost(T * N * D), hOutHost(T * D);
  std::vector<float> hResHost(T * N * N), hPostHost(T * N);
  for (auto& v : gradHost) v = aclFloatToFloat16(rng.Next());
  for (auto& v : xHost) v = aclFloatToFloat16(2.0f * rng.Next());
  for (auto& v : hOutHost) v = aclFloatToFloat16(rng.Next());
  for (auto& v : hResHost) v = 0.25f + 0.2f * rng.Next();
  for (auto& v : hPostHost) v = 1.0f + 0.8f * rng.Next();

  std::vector<SampleTensor> inputs;
  inputs.push_back(MakeHost("gradOutput", {T, N, D}, aclDataType::ACL_FLOAT16, gradHost));
  inputs.push_back(MakeHost("x", {T, N, D}, aclDataType::ACL_FLOAT16, xHost));
  inputs.push_back(MakeHost("hRes", {T, N, N}, aclDataType::ACL_FLOAT, hResHost));
  inputs.push_back(MakeHost("hOut", {T, D}, aclDataType::ACL_FLOAT16, hOutHost));
  inputs.push_back(MakeHost("hPost", {T, N}, aclDataType::ACL_FLOAT, hPostHost));
  std::vector<SampleTensor> outputs;
  outputs.push_back(MakeHost("gradX", {T, N, D}, aclDataType::ACL_FLOAT16, std::vector<aclFloat16>(T * N * D)));
  outputs.push_back(MakeHost("gradHRes", {T, N, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N * N)));
  outputs.push_back(MakeHost("gradHOut", {T, D}, aclDataType::ACL_FLOAT16, std::vector<aclFloat16>(T * D)));
  outputs.push_back(MakeHost("gradHPost", {T, N}, aclDataType::ACL_FLOAT, std::vector<float>(T * N)));
  ret = CreateAclTensors({&inputs, &outputs});
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. First phase: check the arguments, size the workspace. 4. Second phase: run, then wait.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPostBackwardGetWorkspaceSize(inputs[0].tensor, inputs[1].tensor, inputs[2].tensor,
                                             inputs[3].tensor, inputs[4].tensor, outputs[0].tensor,
                                             outputs[1].tensor, outputs[2].tensor, outputs[3].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPostBackwardGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = RunOnStream(aclnnMhcPostBackward, "aclnnMhcPostBackward", workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 5. Copy the outputs back, print their first values, check them.
  ret = CopyToHost(&outputs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  for (auto& t : outputs) PrintFirstValues(t, 4);
  const SampleTensor &g = inputs[0], &x = inputs[1], &hOut = inputs[3];
  int64_t wrong = 0;
  // |got - want| within the output's rounding (fp16: 2^-11) and fp32 sums (1e-5 of the terms' magnitude).
  auto check = [&wrong](double got, double want, double magnitude, double rounding) {
    if (std::fabs(got - want) > rounding * std::fabs(want) + 1e-5 * magnitude + 1e-6) wrong++;
  };
  for (int64_t t = 0; t < T; t++) {
    for (int64_t i = 0; i < N; i++) {
      for (int64_t d = 0; d < D; d++) {  // gradX[i,d] = sum_j hRes[i,j] g[j,d]
        double want = 0.0, magnitude = 0.0;
        for (int64_t j = 0; j < N; j++) {
          const double term = double(hResHost[(t * N + i) * N + j]) * At(g, (t * N + j) * D + d);
          want += term;
          magnitude += std::fabs(term);
        }
        check(At(outputs[0], (t * N + i) * D + d), want, magnitude, 1.0 / 2048);
      }
      for (int64_t j = 0; j < N; j++) {  // gradHRes[i,j] = sum_d x[i,d] g[j,d]
        double want = 0.0, magnitude = 0.0;
        for (int64_t d = 0; d < D; d++) {
          const double term = double(At(x, (t * N + i) * D + d)) * At(g, (t * N + j) * D + d);
          want += term;
          magnitude += std::fabs(term);
        }
        check(At(outputs[1], (t * N + i) * N + j), want, magnitude, 1e-6);
      }
      double want = 0.0, magnitude = 0.0;  // gradHPost[i] = sum_d hOut[d] g[i,d]
      for (int64_t d = 0; d < D; d++) {
        const double term = double(At(hOut, t * D + d)) * At(g, (t * N + i) * D + d);
        want += term;
        magnitude += std::fabs(term);
      }
      check(At(outputs[3], t * N + i), want, magnitude, 1e-6);
    }
    for (int64_t d = 0; d < D; d++) {  // gradHOut[d] = sum_j hPost[j] g[j,d]
      double want = 0.0, magnitude = 0.0;
      for (int64_t j = 0; j < N; j++) {
        const double term = double(hPostHost[t * N + j]) * At(g, (t * N + j) * D + d);
        want += term;
        magnitude += std::fabs(term);
      }
      check(At(outputs[2], t * D + d), want, magnitude, 1.0 / 2048);
    }
  }
  LOG_PRINT("%ld values outside the outputs' rounding of the double results\n", static_cast<long>(wrong));
  const bool ok = wrong == 0;
  LOG_PRINT("%s\n", ok ? "check: PASSED" : "check: FAILED");

  // 6. Tear down in reverse order.
  DestroyTensors({&outputs, &inputs});
  Finalize(deviceId, context, stream);
  return ok ? 0 : 1;
}
