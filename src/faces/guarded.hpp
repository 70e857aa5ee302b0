// The faces' one exception barrier: no C++ exception leaves the library. Each
// face says how a failure is reported in its own terms (Status, a C status code,
// an aclnn code); the catching is written once, here.
#pragma once

#include <exception>
#include <new>

namespace mhc::faces {

// body(), or on_error(out_of_memory, what) when it throws: out_of_memory for
// std::bad_alloc, what = the exception's what() (nullptr for a non-std exception).
template <class Body, class OnError>
auto guarded(Body&& body, OnError&& on_error) noexcept -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return on_error(true, nullptr);
  } catch (const std::exception& e) {
    return on_error(false, e.what());
  } catch (...) {
    return on_error(false, nullptr);
  }
}

}  // namespace mhc::faces
