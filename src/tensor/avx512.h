// Included first by the AVX-512 translation units (compiled with AVX-512 flags, called only after
// the run-time CPU check). GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*; GCC
// bug 105593), so those warnings are off for the rest of such a file.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
