// aclnnMhcPre sample, in the style of CANN's published aclnn samples: the same
// source builds against CANN on an Ascend NPU or against libmhc_aclnn on a CPU.
// T=1024 tokens, N=4 streams, D=512, bf16 x, gamma given, caches requested.
//
// Usage: aclnn_mhc_pre [dump.bin]   (with a path: also writes every input and
// output to it, which the tests compare with the C++ API bit for bit)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"

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
  for (auto* list : {&inputs, &outputs}) {
    for (auto& t : *list) {
      ret = CreateAclTensor(&t);
      CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
  }

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
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }

  // 4. Second phase: run on the stream, then wait for it.
  ret = aclnnMhcPre(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcPre failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
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
    WriteRecord(f, "normEps", aclDataType::ACL_DOUBLE, {}, &normEps, sizeof(normEps));
    WriteRecord(f, "hcEps", aclDataType::ACL_DOUBLE, {}, &hcEps, sizeof(hcEps));
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
