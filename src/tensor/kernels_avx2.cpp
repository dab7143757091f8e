// AVX2 + FMA + F16C kernels (256-bit), used when kernels.cpp finds the CPU and OS support them.
// Only file-local code here (kernels_impl.h explains why).
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/ggml_order.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"
#include "tensor/kernels_impl.h"

namespace k3 {
namespace {
#include "tensor/simd256_dot.inc"
#include "tensor/simd256_convert.inc"
}  // namespace

namespace detail {
void register_avx2_kernels(KernelTable& t) { fill_simd256(t); }
}  // namespace detail
}  // namespace k3
