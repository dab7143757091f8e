// The K-quant vec_dots of one source tree, for bench/row_ab.cpp: compiled by bench/row_ab once per
// tree (and once more for the control) with -I<tree>/src and K3_AB_NS naming the copy, because
// simd256_dot.inc reaches simd256_common.inc by a path relative to src/, which one translation
// unit can resolve in only one tree. At the AVX-512 level (K3_AVX512) the copy is the kernels of
// kernels_avx512.cpp, its registration function renamed per copy.
#include <immintrin.h>

#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/ggml_order.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"
#include "tensor/kernels_impl.h"

#define K3_AB_CAT2(a, b) a##b
#define K3_AB_CAT(a, b) K3_AB_CAT2(a, b)

#ifdef K3_AVX512
#define register_avx512_kernels K3_AB_CAT(register_avx512_kernels_, K3_AB_NS)
#include "tensor/kernels_avx512.cpp"
#define K3_AB_Q4K vec_dot_q4_K_512
#else
namespace k3 {
namespace {
#include "tensor/simd256_dot.inc"
}  // namespace
}  // namespace k3
#define K3_AB_Q4K vec_dot_q45_K<false, block_q4_K>
#endif

namespace k3::K3_AB_NS {
void q4_K(int64_t n, float* s, const void* x, const void* y) { K3_AB_Q4K(n, s, x, y); }
void q2_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_q2_K<KqSum>(n, s, x, y); }
void q6_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_q6_K(n, s, x, y); }
}  // namespace k3::K3_AB_NS
