// What the aclnn samples (examples/aclnn_mhc_*.cpp) share, under the names of
// CANN's published aclnn samples (CHECK_RET, LOG_PRINT, GetShapeSize, Init,
// CreateAclTensor): each sample keeps only its operator — its tensors, its two
// phases, its check. Like the samples, it builds against CANN on an Ascend NPU
// or against libmhc_aclnn on a CPU. Header only, C++17.
#ifndef MHC_EXAMPLES_ACLNN_SAMPLE_H_
#define MHC_EXAMPLES_ACLNN_SAMPLE_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"

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

inline int64_t GetShapeSize(const std::vector<int64_t>& shape) {
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

inline uint16_t FloatToBf16(float f) {  // round to nearest, ties to even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline int Init(int32_t deviceId, aclrtContext* context, aclrtStream* stream) {
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

// Init's reverse: stream, context, device, runtime.
inline void Finalize(int32_t deviceId, aclrtContext context, aclrtStream stream) {
  aclrtDestroyStream(stream);
  aclrtDestroyContext(context);
  aclrtResetDevice(deviceId);
  aclFinalize();
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

inline int CreateAclTensor(SampleTensor* t) {
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

// CreateAclTensor for every tensor of the lists, in order; stops at the first failure.
inline int CreateAclTensors(std::initializer_list<std::vector<SampleTensor>*> lists) {
  for (auto* list : lists) {
    for (auto& t : *list) {
      auto ret = CreateAclTensor(&t);
      CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
  }
  return 0;
}

// The tensors' device memory back into their host copies.
inline int CopyToHost(std::vector<SampleTensor>* tensors) {
  for (auto& t : *tensors) {
    auto ret = aclrtMemcpy(t.host.data(), t.host.size(), t.deviceAddr, t.host.size(), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
              return ret);
  }
  return 0;
}

// aclDestroyTensor and aclrtFree for every tensor of the lists, in order.
inline void DestroyTensors(std::initializer_list<std::vector<SampleTensor>*> lists) {
  for (auto* list : lists) {
    for (auto& t : *list) {
      aclDestroyTensor(t.tensor);
      aclrtFree(t.deviceAddr);
    }
  }
}

// The second phase of an operator whose first phase gave workspaceSize and
// executor: the workspace, the run on the stream (run is aclnnXxx, name its
// name for the messages), the wait for the stream, the workspace freed.
template <typename Run>
int RunOnStream(Run run, const char* name, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    auto ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  auto ret = run(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("%s failed. ERROR: %d (%s)\n", name, ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
  if (workspaceSize > 0) {
    aclrtFree(workspaceAddr);
  }
  return 0;
}

// Element i of a sample tensor's host copy as float (bf16, fp16 or fp32).
inline float At(const SampleTensor& t, int64_t i) {
  if (t.dataType == aclDataType::ACL_FLOAT) {
    float v;
    std::memcpy(&v, t.host.data() + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, t.host.data() + 2 * i, 2);
  return t.dataType == aclDataType::ACL_BF16 ? Bf16ToFloat(h) : aclFloat16ToFloat(h);
}

// "name: v0 v1 ...": the first count values (at most all of them), one line.
inline void PrintFirstValues(const SampleTensor& t, int64_t count) {
  LOG_PRINT("%s:", t.name.c_str());
  for (int64_t i = 0; i < count && i < GetShapeSize(t.shape); i++) LOG_PRINT(" %f", At(t, i));
  LOG_PRINT("\n");
}

// The dump the tests compare with the C++ API: "MHCDUMP1", then a record per
// tensor (name length u32, name, aclDataType i32, rank u32, dims i64[rank],
// byte count u64, the host copy's bytes).
inline void WriteRecord(FILE* f, const std::string& name, aclDataType dataType, const std::vector<int64_t>& shape,
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

inline int WriteDump(const char* path, std::initializer_list<const std::vector<SampleTensor>*> lists) {
  FILE* f = fopen(path, "wb");
  CHECK_RET(f != nullptr, LOG_PRINT("cannot open %s\n", path); return -1);
  fwrite("MHCDUMP1", 1, 8, f);
  for (auto* list : lists) {
    for (auto& t : *list) WriteRecord(f, t.name, t.dataType, t.shape, t.host.data(), t.host.size());
  }
  CHECK_RET(fclose(f) == 0, LOG_PRINT("cannot write %s\n", path); return -1);
  return 0;
}

#endif  // MHC_EXAMPLES_ACLNN_SAMPLE_H_
