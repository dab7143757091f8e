// AVX2 + FMA + F16C + AVX-VNNI kernels: the 256-bit kernels with the VEX vpdpbusd / vpdpwssd, used
// when kernels.cpp finds the CPUID bit. Only file-local code here (kernels_impl.h explains why).
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
#define K3_AVXVNNI 1
#include "tensor/simd256_dot.inc"
#include "tensor/simd256_convert.inc"
#undef K3_AVXVNNI
}  // namespace

namespace detail {
void register_avxvnni_kernels(KernelTable& t) { fill_simd256(t); }
}  // namespace detail
}  // namespace k3
