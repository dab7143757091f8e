// AVX-512 build of the lane-parallel K-quant quantizers (32 sub-blocks per logical vector, two zmm registers).
#define K3_FAST_W 16
#define K3_FAST_NS avx512
#include "quantize/fast_kquants_impl.h"
