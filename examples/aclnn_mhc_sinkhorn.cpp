// aclnnMhcSinkhorn sample, in the style of CANN's published aclnn samples: the
// same source builds against CANN on an Ascend NPU or against libmhc_aclnn on
// a CPU. x [T=1024, N=4, N=4] fp32 (MhcPre's h_res logits), 20 iterations,
// the backward's caches requested (2*I*T*N*8 and 2*I*T*8 floats). Checks that
// every output matrix is doubly stochastic: its columns (the last step's)
// sum to 1, its rows nearly so after 20 iterations.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_sinkhorn.h"

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
  for (auto* list : {&inputs, &outputs}) {
    for (auto& t : *list) {
      ret = CreateAclTensor(&t);
      CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
  }

  // 3. First phase: check the arguments, size the workspace.
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

  // 4. Second phase: run on the stream, then wait for it.
  ret = aclnnMhcSinkhorn(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcSinkhorn failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

  // 5. Copy the outputs back, print the first matrix, check the row and column sums.
  for (auto& t : outputs) {
    ret = aclrtMemcpy(t.host.data(), t.host.size(), t.deviceAddr, t.host.size(), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
              return ret);
  }
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
  for (auto* list : {&outputs, &inputs}) {
    for (auto& t : *list) {
      aclDestroyTensor(t.tensor);
      aclrtFree(t.deviceAddr);
    }
  }
  if (workspaceSize > 0) {
    aclrtFree(workspaceAddr);
  }
  aclrtDestroyStream(stream);
  aclrtDestroyContext(context);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return ok ? 0 : 1;
}
