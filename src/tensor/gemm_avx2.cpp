// AVX2 matrix-matrix tiles and decode rows (gemm_simd256.inc), bit-identical per output to the
// 256-bit vec_dot kernels as compiled for AVX2 (gemm.h).
// Only file-local code here (kernels_impl.h explains why).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/gemm.h"
#include "tensor/ggml_order.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"

namespace k3 {
namespace {

#include "tensor/simd256_common.inc"
#include "tensor/gemm_tiles.inc"
#include "tensor/gemm_simd256.inc"

}  // namespace

namespace detail {
const GemmKernel* gemm_kernel_avx2(GgmlType t) { return simd256_kernel(t); }
}  // namespace detail
}  // namespace k3
