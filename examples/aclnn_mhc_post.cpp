// aclnnMhcPost sample, in the style of CANN's published aclnn samples: the
// same source builds against CANN on an Ascend NPU or against libmhc_aclnn on
// a CPU. x [B=2, S=256, N=4, D=512] bf16, hRes [B,S,N,N], hOut [B,S,D] bf16,
// hPost [B,S,N]: out[j] = hPost[j] hOut + sum_i hRes[i,j] x[i] (hRes
// transposed). Checks every output against a double-precision computation.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_post.h"

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

uint16_t FloatToBf16(float f) {  // round to nearest, ties to even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

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

// Element i of a sample tensor as float (bf16, fp16 or fp32).
float At(const SampleTensor& t, int64_t i) {
  if (t.dataType == aclDataType::ACL_FLOAT) {
    float v;
    std::memcpy(&v, t.host.data() + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, t.host.data() + 2 * i, 2);
  return t.dataType == aclDataType::ACL_BF16 ? Bf16ToFloat(h) : aclFloat16ToFloat(h);
}

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
  for (auto* list : {&inputs, &outputs}) {
    for (auto& t : *list) {
      ret = CreateAclTensor(&t);
      CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
  }

  // 3. First phase: check the arguments, size the workspace. 4. Second phase: run, then wait.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPostGetWorkspaceSize(inputs[0].tensor, inputs[1].tensor, inputs[2].tensor, inputs[3].tensor,
                                     outputs[0].tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPostGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  ret = aclnnMhcPost(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcPost failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
  if (workspaceSize > 0) {
    aclrtFree(workspaceAddr);
  }

  // 5. Copy the output back, print its first values, check it.
  for (auto& t : outputs) {
    ret = aclrtMemcpy(t.host.data(), t.host.size(), t.deviceAddr, t.host.size(), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
              return ret);
  }
  LOG_PRINT("out:");
  for (int64_t i = 0; i < 4; i++) LOG_PRINT(" %f", At(outputs[0], i));
  LOG_PRINT("\n");
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
