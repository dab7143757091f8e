// AVX2 build of the lane-parallel K-quant quantizers (16 sub-blocks per logical vector, two ymm registers).
#define K3_FAST_W 8
#define K3_FAST_NS avx2
#include "quantize/fast_kquants_impl.h"
