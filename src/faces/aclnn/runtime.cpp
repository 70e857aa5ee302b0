// CANN's runtime (acl/acl.h, acl/acl_rt.h) on the host: one device (the CPU),
// contexts and streams as handles, "device" memory as 64-byte aligned host
// memory. Streams are synchronous: an aclnn run is finished when its call
// returns, so synchronising a stream only checks the handle.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "faces/aclnn/face.hpp"

namespace mhc::faces::aclnn {
namespace {

thread_local std::string recent_error;

struct Stream {};
struct Context {};

HandleRegistry<Stream>& streams() {
  static HandleRegistry<Stream> registry;
  return registry;
}
HandleRegistry<Context>& contexts() {
  static HandleRegistry<Context> registry;
  return registry;
}
// The context aclrtSetDevice makes current when the caller sets none (CANN's
// default context): always live, never destroyed.
uintptr_t default_context() {
  static const uintptr_t id = contexts().add(std::make_shared<Context>());
  return id;
}
thread_local uintptr_t current_context = 0;

std::atomic<bool> initialized{false};

// Live allocations of aclrtMalloc / aclrtMallocHost, so that freeing an unknown
// pointer is an error rather than heap corruption.
std::mutex allocations_mutex;
std::unordered_map<void*, size_t>& allocations() {
  static std::unordered_map<void*, size_t> live;
  return live;
}

aclError check_device(const char* call, int32_t device_id) {
  if (device_id != 0)
    return fail(ACL_ERROR_RT_INVALID_DEVICEID,
                std::string(call) + ": deviceId " + std::to_string(device_id) +
                    " does not exist (one device, id 0: the CPU)");
  return ACL_SUCCESS;
}

aclError allocate(const char* call, void** ptr, size_t size) {
  if (ptr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the pointer to the result is NULL");
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": size must be > 0");
  if (size > SIZE_MAX - 63) return fail(ACL_ERROR_BAD_ALLOC, std::string(call) + ": size too large");
  void* p = std::aligned_alloc(64, (size + 63) / 64 * 64);
  if (p == nullptr)
    return fail(ACL_ERROR_BAD_ALLOC, std::string(call) + ": could not allocate " + std::to_string(size) + " bytes");
  try {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations().emplace(p, size);
  } catch (const std::exception&) {
    std::free(p);
    return fail(ACL_ERROR_BAD_ALLOC, std::string(call) + ": out of host memory");
  }
  *ptr = p;
  return ACL_SUCCESS;
}

aclError release(const char* call, void* ptr) {
  if (ptr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": pointer is NULL");
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    if (allocations().erase(ptr) == 0)
      return fail(ACL_ERROR_INVALID_PARAM,
                  std::string(call) + ": pointer was not allocated by aclrtMalloc/aclrtMallocHost or was already freed");
  }
  std::free(ptr);
  return ACL_SUCCESS;
}

aclError copy(const char* call, void* dst, size_t dest_max, const void* src, size_t count, int kind) {
  if (kind < ACL_MEMCPY_HOST_TO_HOST || kind > ACL_MEMCPY_DEFAULT)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": unknown aclrtMemcpyKind " + std::to_string(kind));
  if (count > dest_max)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": count " + std::to_string(count) +
                                             " exceeds destMax " + std::to_string(dest_max));
  if (count == 0) return ACL_SUCCESS;
  if (dst == nullptr || src == nullptr)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + (dst == nullptr ? ": dst is NULL" : ": src is NULL"));
  std::memmove(dst, src, count);  // every kind is host to host here
  return ACL_SUCCESS;
}

aclError fill(const char* call, void* ptr, size_t max_count, int32_t value, size_t count) {
  if (count > max_count)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": count " + std::to_string(count) +
                                             " exceeds maxCount " + std::to_string(max_count));
  if (count == 0) return ACL_SUCCESS;
  if (ptr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": devPtr is NULL");
  std::memset(ptr, value, count);
  return ACL_SUCCESS;
}

aclError check_stream(const char* call, aclrtStream stream) {
  if (!stream_is_usable(stream))
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": not a live stream (destroyed or never created)");
  return ACL_SUCCESS;
}

// Runtime calls that allocate bookkeeping: no exception crosses the C boundary.
template <class Body>
aclError no_throw(const char* call, Body body) {
  try {
    return body();
  } catch (const std::exception&) {
    return fail(ACL_ERROR_BAD_ALLOC, std::string(call) + ": out of host memory");
  }
}

}  // namespace

void set_recent_error(std::string message) { recent_error = std::move(message); }

int fail(int code, std::string message) {
  set_recent_error(std::move(message));
  return code;
}

uintptr_t next_handle_id() {
  // Multiples of 64 starting well above 0: non-NULL, pointer-like, never reused.
  static std::atomic<uintptr_t> counter{1};
  return (counter.fetch_add(1) + 0x1000) * 64;
}

bool stream_is_usable(aclrtStream stream) {
  return stream == nullptr || streams().find(handle_id(stream)) != nullptr;
}

}  // namespace mhc::faces::aclnn

using namespace mhc::faces::aclnn;

extern "C" {

const char* aclGetRecentErrMsg(void) { return recent_error.c_str(); }

aclError aclInit(const char* configPath) {
  (void)configPath;  // CANN's config file sets dump/profiling options: nothing to set here
  if (initialized.exchange(true))
    return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialized (call aclFinalize first)");
  return ACL_SUCCESS;
}

aclError aclFinalize(void) {
  if (!initialized.exchange(false))
    return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: not initialized");
  return ACL_SUCCESS;
}

aclError aclrtSetDevice(int32_t deviceId) {
  if (aclError e = check_device("aclrtSetDevice", deviceId); e != ACL_SUCCESS) return e;
  if (current_context == 0) current_context = default_context();
  return ACL_SUCCESS;
}

aclError aclrtResetDevice(int32_t deviceId) { return check_device("aclrtResetDevice", deviceId); }

aclError aclrtGetDevice(int32_t* deviceId) {
  if (deviceId == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
  *deviceId = 0;
  return ACL_SUCCESS;
}

aclError aclrtGetDeviceCount(uint32_t* count) {
  if (count == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is NULL");
  *count = 1;
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeDevice(void) { return ACL_SUCCESS; }

aclError aclrtCreateContext(aclrtContext* context, int32_t deviceId) {
  if (context == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateContext: context is NULL");
  if (aclError e = check_device("aclrtCreateContext", deviceId); e != ACL_SUCCESS) return e;
  return no_throw("aclrtCreateContext", [&] {
    const uintptr_t id = contexts().add(std::make_shared<Context>());
    current_context = id;  // CANN makes a new context current on the calling thread
    *context = as_handle<void>(id);
    return ACL_SUCCESS;
  });
}

aclError aclrtDestroyContext(aclrtContext context) {
  const uintptr_t id = handle_id(context);
  if (id == default_context() || contexts().take(id) == nullptr)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyContext: not a context from aclrtCreateContext (or already destroyed)");
  if (current_context == id) current_context = 0;
  return ACL_SUCCESS;
}

aclError aclrtSetCurrentContext(aclrtContext context) {
  const uintptr_t id = handle_id(context);
  if (contexts().find(id) == nullptr)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetCurrentContext: not a live context");
  current_context = id;
  return ACL_SUCCESS;
}

aclError aclrtGetCurrentContext(aclrtContext* context) {
  if (context == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetCurrentContext: context is NULL");
  *context = as_handle<void>(current_context != 0 ? current_context : default_context());
  return ACL_SUCCESS;
}

aclError aclrtCreateStream(aclrtStream* stream) {
  if (stream == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is NULL");
  return no_throw("aclrtCreateStream", [&] {
    *stream = as_handle<void>(streams().add(std::make_shared<Stream>()));
    return ACL_SUCCESS;
  });
}

aclError aclrtDestroyStream(aclrtStream stream) {
  if (stream == nullptr || streams().take(handle_id(stream)) == nullptr)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: not a live stream (destroyed or never created)");
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  // Work launched on a stream is complete when its call returns.
  return check_stream("aclrtSynchronizeStream", stream);
}

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  (void)policy;  // huge pages or not is the host allocator's business
  return allocate("aclrtMalloc", devPtr, size);
}

aclError aclrtFree(void* devPtr) { return release("aclrtFree", devPtr); }

aclError aclrtMallocHost(void** hostPtr, size_t size) { return allocate("aclrtMallocHost", hostPtr, size); }

aclError aclrtFreeHost(void* hostPtr) { return release("aclrtFreeHost", hostPtr); }

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  return copy("aclrtMemcpy", dst, destMax, src, count, enum_value(kind));
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  return fill("aclrtMemset", devPtr, maxCount, value, count);
}

aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream) {
  if (aclError e = check_stream("aclrtMemcpyAsync", stream); e != ACL_SUCCESS) return e;
  return copy("aclrtMemcpyAsync", dst, destMax, src, count, enum_value(kind));
}

aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
  if (aclError e = check_stream("aclrtMemsetAsync", stream); e != ACL_SUCCESS) return e;
  return fill("aclrtMemsetAsync", devPtr, maxCount, value, count);
}

}  // extern "C"
