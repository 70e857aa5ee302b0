// <immintrin.h> for the AMX family's AVX-512 code (functions with target
// attributes), with the warnings GCC 12 gives inside its own AVX-512 headers (the
// _mm512_undefined_* they use) silenced for the including file.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
