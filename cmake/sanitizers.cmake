# Sanitizer and fuzzing builds of mhc (docs/reliability.md, scripts/hardening.sh).
#
#   -DMHC_SANITIZE=address,undefined  ASan + UBSan on every target; no recovery, so the
#                                     first report fails the program (and its test)
#   -DMHC_SANITIZE=thread             TSan on every target
#   -DMHC_FUZZ=ON                     the libFuzzer targets of tests/fuzz (clang only); every
#                                     other target gets -fsanitize=fuzzer-no-link so the
#                                     fuzzers see the library's coverage (test programs still
#                                     link and run normally: the coverage hooks are weak)
#   -DMHC_FUZZ_REPLAY=ON              tests/fuzz built with a plain main() that replays the
#                                     seed corpus (any compiler; no libFuzzer needed)
#
# Include it right after project() so that the flags reach every target:
#   include(cmake/sanitizers.cmake)
# or, without touching CMakeLists.txt, configure with
#   -DCMAKE_PROJECT_mhc_INCLUDE=<repo>/cmake/sanitizers.cmake
include_guard(GLOBAL)

set(MHC_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined | thread | empty")
option(MHC_FUZZ "Build the libFuzzer targets in tests/fuzz (clang)" OFF)
option(MHC_FUZZ_REPLAY "Build tests/fuzz as corpus replay programs (any compiler)" OFF)

# Sanitizer and fuzzing builds compile at -O1 with line tables only, whatever the build
# type: the sanitizers' own advice, and at -O2 -g GCC takes 388 s on the SIMD kernels' largest
# file with ASan + UBSan (81 s at -O1 -g1); reports still name file and line.
if(MHC_SANITIZE OR MHC_FUZZ)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    add_compile_options(-O1 -gline-tables-only)
  else()
    add_compile_options(-O1 -g1)
  endif()
endif()

if(MHC_SANITIZE)
  if(MHC_SANITIZE MATCHES "thread" AND MHC_SANITIZE MATCHES "address|memory")
    message(FATAL_ERROR "MHC_SANITIZE: thread cannot be combined with address or memory")
  endif()
  set(_mhc_sanitize_flags -fsanitize=${MHC_SANITIZE} -fno-omit-frame-pointer)
  if(NOT MHC_SANITIZE MATCHES "thread")
    list(APPEND _mhc_sanitize_flags -fno-sanitize-recover=all)
  endif()
  add_compile_options(${_mhc_sanitize_flags})
  add_link_options(-fsanitize=${MHC_SANITIZE})
  message(STATUS "mhc: sanitizers ${MHC_SANITIZE} on every target")
endif()

if(MHC_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MHC_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                        "-DCMAKE_C_COMPILER=clang (Debian: clang, libclang-rt-14-dev)")
  endif()
  # Edge coverage only: comparison tracing (trace-cmp) in the kernels' inner loops
  # costs more than half the fuzzers' time and the inputs are not compared bytes.
  add_compile_options(-fsanitize=fuzzer-no-link -fno-sanitize-coverage=trace-cmp)
  message(STATUS "mhc: libFuzzer targets in tests/fuzz")
endif()
