// aclnnMhcSinkhornBackward sample, in the style of CANN's published aclnn
// samples: the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. aclnnMhcSinkhorn (x [B=2, S=512, N=4, N=4] fp32, 20
// iterations) writes the caches, aclnnMhcSinkhornBackward reads them with a
// gradient of the output. Checks that every row of the gradient of x sums to
// 0 (the row softmax's Jacobian annihilates constants).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"
#include "aclnnop/aclnn_mhc_sinkhorn_backward.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(message, ...)     \
  do {                              \
    printf(message, ##__VA_ARGS__); \
  } while (0)

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t shapeSize = 1;
  for (auto i : shape) shapeSize *= i;
  return shapeSize;
}

// Deterministic inputs: a 32-bit LCG mapped to [-1, 1).
struct Lcg {
  uint32_t state;
  float Next() {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  }
};

int Init(int32_t deviceId, aclrtContext* context, aclrtStream* stream) {
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateContext(context, deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateContext failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetCurrentContext(*context);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetCurrentContext failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
  return 0;
}

// A tensor of the sample: host copy, device memory, aclTensor.
struct SampleTensor {
  std::string name;
  std::vector<int64_t> shape;
  aclDataType dataType;
  std::vector<uint8_t> host;
  void* deviceAddr = nullptr;
  aclTensor* tensor = nullptr;
};

template <typename T>
SampleTensor MakeHost(const std::string& name, const std::vector<int64_t>& shape, aclDataType dataType,
                      const std::vector<T>& values) {
  SampleTensor t{name, shape, dataType, std::vector<uint8_t>(values.size() * sizeof(T))};
  std::memcpy(t.host.data(), values.data(), t.host.size());
  return t;
}

int CreateAclTensor(SampleTensor* t) {
  auto size = t->host.size();
  auto ret = aclrtMalloc(&t->deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(t->deviceAddr, size, t->host.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
  // contiguous strides
  std::vector<int64_t> strides(t->shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(t->shape.size()) - 2; i >= 0; i--) {
    strides[i] = t->shape[i + 1] * strides[i + 1];
  }
  t->tensor = aclCreateTensor(t->shape.data(), t->shape.size(), t->dataType, strides.data(), 0,
                              aclFormat::ACL_FORMAT_ND, t->shape.data(), t->shape.size(), t->deviceAddr);
  CHECK_RET(t->tensor != nullptr, LOG_PRINT("aclCreateTensor failed: %s\n", aclGetRecentErrMsg()); return -1);
  return 0;
}

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
  for (auto* list : {&inputs, &outputs}) {
    for (auto& t : *list) {
      ret = CreateAclTensor(&t);
      CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
  }

  // 3. The forward, with the caches.
  {
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor;
    ret = aclnnMhcSinkhornGetWorkspaceSize(inputs[0].tensor, eps, numIters, outputs[0].tensor, outputs[1].tensor,
                                           outputs[2].tensor, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnMhcSinkhornGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
              return ret);
    void* workspaceAddr = nullptr;
    if (workspaceSize > 0) {
      ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
      CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnMhcSinkhorn(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcSinkhorn failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
              return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
    if (workspaceSize > 0) {
      aclrtFree(workspaceAddr);
    }
  }

  // 4. The backward, from the caches.
  {
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor;
    ret = aclnnMhcSinkhornBackwardGetWorkspaceSize(inputs[1].tensor, outputs[1].tensor, outputs[2].tensor,
                                                   outputs[3].tensor, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnMhcSinkhornBackwardGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
              return ret);
    void* workspaceAddr = nullptr;
    if (workspaceSize > 0) {
      ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
      CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnMhcSinkhornBackward(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcSinkhornBackward failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
              return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
    if (workspaceSize > 0) {
      aclrtFree(workspaceAddr);
    }
  }

  // 5. Copy the outputs back, print the first gradient, check its row sums.
  for (auto& t : outputs) {
    ret = aclrtMemcpy(t.host.data(), t.host.size(), t.deviceAddr, t.host.size(), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
              return ret);
  }
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
  for (auto* list : {&outputs, &inputs}) {
    for (auto& t : *list) {
      aclDestroyTensor(t.tensor);
      aclrtFree(t.deviceAddr);
    }
  }
  aclrtDestroyStream(stream);
  aclrtDestroyContext(context);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return ok ? 0 : 1;
}
