// <immintrin.h> for the AMX family's AVX-512 code (functions with target
// attributes). GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_*
// they use); the warnings are silenced for those headers only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
