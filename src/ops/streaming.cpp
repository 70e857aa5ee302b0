// The streaming-store policy (streaming.hpp).
#include "ops/streaming.hpp"

#include <cstdlib>
#include <cstring>

namespace mhc::ops {
namespace {

bool cpu_is_amd() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

bool decide() {
  if (const char* env = std::getenv("MHC_STREAMING_STORES"); env != nullptr && *env != '\0')
    return std::strcmp(env, "0") != 0;
  return !cpu_is_amd();
}

}  // namespace

bool streaming_stores() {
  static const bool allowed = decide();
  return allowed;
}

}  // namespace mhc::ops
