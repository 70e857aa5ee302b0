// The host runtime behind acl/acl.h: CANN's numbers, its call sequence, and
// errors (never crashes) for misuse.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"

namespace {

TEST(AclEnums, HaveCannsNumbers) {
  EXPECT_EQ(ACL_FLOAT, 0);
  EXPECT_EQ(ACL_FLOAT16, 1);
  EXPECT_EQ(ACL_INT8, 2);
  EXPECT_EQ(ACL_INT32, 3);
  EXPECT_EQ(ACL_UINT8, 4);
  EXPECT_EQ(ACL_INT16, 6);
  EXPECT_EQ(ACL_UINT16, 7);
  EXPECT_EQ(ACL_UINT32, 8);
  EXPECT_EQ(ACL_INT64, 9);
  EXPECT_EQ(ACL_UINT64, 10);
  EXPECT_EQ(ACL_DOUBLE, 11);
  EXPECT_EQ(ACL_BOOL, 12);
  EXPECT_EQ(ACL_BF16, 27);
  EXPECT_EQ(ACL_FORMAT_NCHW, 0);
  EXPECT_EQ(ACL_FORMAT_NHWC, 1);
  EXPECT_EQ(ACL_FORMAT_ND, 2);
  EXPECT_EQ(ACL_FORMAT_NC1HWC0, 3);
  EXPECT_EQ(ACL_FORMAT_FRACTAL_Z, 4);
  EXPECT_EQ(ACL_FORMAT_NC1HWC0_C04, 12);
  EXPECT_EQ(ACL_FORMAT_HWCN, 16);
  EXPECT_EQ(ACL_FORMAT_NDHWC, 27);
  EXPECT_EQ(ACL_FORMAT_FRACTAL_NZ, 29);
  EXPECT_EQ(ACL_FORMAT_NCDHW, 30);
  EXPECT_EQ(ACL_FORMAT_NDC1HWC0, 32);
  EXPECT_EQ(ACL_FRACTAL_Z_3D, 33);
  EXPECT_EQ(ACL_MEMCPY_HOST_TO_HOST, 0);
  EXPECT_EQ(ACL_MEMCPY_HOST_TO_DEVICE, 1);
  EXPECT_EQ(ACL_MEMCPY_DEVICE_TO_HOST, 2);
  EXPECT_EQ(ACL_MEMCPY_DEVICE_TO_DEVICE, 3);
  EXPECT_EQ(ACL_MEM_MALLOC_HUGE_FIRST, 0);
  EXPECT_EQ(ACL_MEM_MALLOC_HUGE_ONLY, 1);
  EXPECT_EQ(ACL_MEM_MALLOC_NORMAL_ONLY, 2);
  EXPECT_EQ(ACL_SUCCESS, 0);
  EXPECT_EQ(ACLNN_ERR_PARAM_NULLPTR, 161001);
  EXPECT_EQ(ACLNN_ERR_PARAM_INVALID, 161002);
  EXPECT_EQ(ACLNN_ERR_RUNTIME_ERROR, 361001);
}

TEST(AclRuntime, TheCannSampleSequenceWorks) {
  ASSERT_EQ(aclInit(nullptr), ACL_SUCCESS);
  EXPECT_EQ(aclInit(nullptr), ACL_ERROR_REPEAT_INITIALIZE);
  ASSERT_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  aclrtContext context = nullptr;
  ASSERT_EQ(aclrtCreateContext(&context, 0), ACL_SUCCESS);
  ASSERT_EQ(aclrtSetCurrentContext(context), ACL_SUCCESS);
  aclrtContext current = nullptr;
  ASSERT_EQ(aclrtGetCurrentContext(&current), ACL_SUCCESS);
  EXPECT_EQ(current, context);
  aclrtStream stream = nullptr;
  ASSERT_EQ(aclrtCreateStream(&stream), ACL_SUCCESS);
  EXPECT_NE(stream, nullptr);
  EXPECT_EQ(aclrtSynchronizeStream(stream), ACL_SUCCESS);
  EXPECT_EQ(aclrtSynchronizeStream(nullptr), ACL_SUCCESS);  // the default stream
  EXPECT_EQ(aclrtDestroyStream(stream), ACL_SUCCESS);
  EXPECT_NE(aclrtDestroyStream(stream), ACL_SUCCESS);
  EXPECT_NE(aclrtSynchronizeStream(stream), ACL_SUCCESS);
  EXPECT_EQ(aclrtDestroyContext(context), ACL_SUCCESS);
  EXPECT_NE(aclrtDestroyContext(context), ACL_SUCCESS);
  EXPECT_NE(aclrtSetCurrentContext(context), ACL_SUCCESS);
  EXPECT_EQ(aclrtResetDevice(0), ACL_SUCCESS);
  EXPECT_EQ(aclFinalize(), ACL_SUCCESS);
  EXPECT_NE(aclFinalize(), ACL_SUCCESS);
}

TEST(AclRuntime, OneDeviceOnly) {
  uint32_t count = 0;
  ASSERT_EQ(aclrtGetDeviceCount(&count), ACL_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(aclrtSetDevice(1), ACL_ERROR_RT_INVALID_DEVICEID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("deviceId 1"), std::string::npos);
  aclrtContext context = nullptr;
  EXPECT_NE(aclrtCreateContext(&context, 3), ACL_SUCCESS);
}

TEST(AclRuntime, MallocCopyMemsetFree) {
  void* dev = nullptr;
  ASSERT_EQ(aclrtMalloc(&dev, 100, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(dev) % 64, 0u);
  std::vector<uint8_t> host(100);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i);
  ASSERT_EQ(aclrtMemcpy(dev, 100, host.data(), 100, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  std::vector<uint8_t> back(100, 0);
  ASSERT_EQ(aclrtMemcpy(back.data(), back.size(), dev, 100, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(back, host);
  ASSERT_EQ(aclrtMemset(dev, 100, 7, 10), ACL_SUCCESS);
  ASSERT_EQ(aclrtMemcpy(back.data(), back.size(), dev, 100, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(back[9], 7);
  EXPECT_EQ(back[10], 10);
  EXPECT_EQ(aclrtFree(dev), ACL_SUCCESS);
}

TEST(AclRuntime, MisuseIsAnErrorWithAMessage) {
  std::vector<uint8_t> a(16, 1), b(16, 2);
  EXPECT_EQ(aclrtMemcpy(a.data(), 8, b.data(), 16, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("destMax"), std::string::npos);
  EXPECT_EQ(a[0], 1);  // nothing copied
  EXPECT_EQ(aclrtMemcpy(nullptr, 16, b.data(), 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(a.data(), 16, nullptr, 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(a.data(), 16, b.data(), 16, static_cast<aclrtMemcpyKind>(9)), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemset(a.data(), 8, 0, 16), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(aclrtMemset(nullptr, 16, 0, 16), ACL_ERROR_INVALID_PARAM);
  void* p = nullptr;
  EXPECT_EQ(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMalloc(nullptr, 16, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtFree(a.data()), ACL_ERROR_INVALID_PARAM);  // not ours: refused, not freed
  ASSERT_EQ(aclrtMalloc(&p, 16, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
  EXPECT_EQ(aclrtFree(p), ACL_SUCCESS);
  EXPECT_EQ(aclrtFree(p), ACL_ERROR_INVALID_PARAM);  // double free
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("aclrtFree"), std::string::npos);
}

TEST(AclRuntime, AsyncCopiesAreDoneOnReturn) {
  aclrtStream stream = nullptr;
  ASSERT_EQ(aclrtCreateStream(&stream), ACL_SUCCESS);
  std::vector<uint8_t> a(8, 0), b(8, 9);
  ASSERT_EQ(aclrtMemcpyAsync(a.data(), 8, b.data(), 8, ACL_MEMCPY_HOST_TO_DEVICE, stream), ACL_SUCCESS);
  EXPECT_EQ(a, b);
  ASSERT_EQ(aclrtMemsetAsync(a.data(), 8, 3, 8, stream), ACL_SUCCESS);
  EXPECT_EQ(a[7], 3);
  EXPECT_EQ(aclrtDestroyStream(stream), ACL_SUCCESS);
  EXPECT_NE(aclrtMemsetAsync(a.data(), 8, 3, 8, stream), ACL_SUCCESS);
}

TEST(AclTensor, CreateRejectsBadArgumentsAndDestroyIsChecked) {
  const int64_t dims[2] = {2, 3}, negative[2] = {2, -1};
  float data[6] = {};
  EXPECT_EQ(aclCreateTensor(nullptr, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 2, data), nullptr);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("viewDims"), std::string::npos);
  EXPECT_EQ(aclCreateTensor(negative, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 2, data), nullptr);
  aclTensor* t = aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 2, data);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclDestroyTensor(nullptr), ACLNN_SUCCESS);
}

TEST(AclErrors, TheRecentMessageIsPerThread) {
  std::vector<uint8_t> a(4);
  EXPECT_NE(aclrtMemcpy(a.data(), 1, a.data(), 4, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);
  std::string other;
  std::thread([&] { other = aclGetRecentErrMsg(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(aclGetRecentErrMsg()), "");
}

}  // namespace
