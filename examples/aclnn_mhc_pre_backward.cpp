// aclnnMhcPreBackward sample, in the style of CANN's published aclnn samples:
// the same source builds against CANN on an Ascend NPU or against
// libmhc_aclnn on a CPU. T=1024 tokens, N=4 streams, D=512, bf16 x, gamma and
// gradXPost given.
//
// Usage: aclnn_mhc_pre_backward [dump.bin]   (with a path: also writes every input and
// output to it, which the tests compare with the C++ API bit for bit)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"

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

void WriteRecord(FILE* f, const std::string& name, aclDataType dataType, const std::vector<int64_t>& shape,
                 const void* data, uint64_t bytes) {
  const uint32_t nameLen = static_cast<uint32_t>(name.size());
  const int32_t dt = dataType;
  const uint32_t rank = static_cast<uint32_t>(shape.size());
  fwrite(&nameLen, 4, 1, f);
  fwrite(name.data(), 1, nameLen, f);
  fwrite(&dt, 4, 1, f);
  fwrite(&rank, 4, 1, f);
  if (rank > 0) fwrite(shape.data(), 8, rank, f);
  fwrite(&bytes, 8, 1, f);
  fwrite(data, 1, bytes, f);
}

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
  for (auto* list : {&inputs, &outputs}) {
    for (auto& t : *list) {
      ret = CreateAclTensor(&t);
      CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
  }

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
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }

  // 4. Second phase: run on the stream, then wait for it.
  ret = aclnnMhcPreBackward(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMhcPreBackward failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg()); return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

  // 5. Copy the outputs back and print their first values.
  for (auto& t : outputs) {
    ret = aclrtMemcpy(t.host.data(), t.host.size(), t.deviceAddr, t.host.size(), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
              return ret);
    LOG_PRINT("%s:", t.name.c_str());
    for (int64_t i = 0; i < 4 && i < GetShapeSize(t.shape); i++) {
      float v;
      if (t.dataType == aclDataType::ACL_BF16) {
        uint16_t h;
        std::memcpy(&h, t.host.data() + 2 * i, 2);
        v = Bf16ToFloat(h);
      } else {
        std::memcpy(&v, t.host.data() + 4 * i, 4);
      }
      LOG_PRINT(" %f", v);
    }
    LOG_PRINT("\n");
  }
  if (argc > 1) {
    FILE* f = fopen(argv[1], "wb");
    CHECK_RET(f != nullptr, LOG_PRINT("cannot open %s\n", argv[1]); return -1);
    fwrite("MHCDUMP1", 1, 8, f);
    WriteRecord(f, "hcEps", aclDataType::ACL_FLOAT, {}, &hcEps, sizeof(hcEps));
    for (auto* list : {&inputs, &outputs}) {
      for (auto& t : *list) WriteRecord(f, t.name, t.dataType, t.shape, t.host.data(), t.host.size());
    }
    CHECK_RET(fclose(f) == 0, LOG_PRINT("cannot write %s\n", argv[1]); return -1);
  }

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
  return 0;
}
