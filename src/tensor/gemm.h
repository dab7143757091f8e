// Register-tiled matrix-matrix products (several weight rows × several activation rows per
// tile), used by matmul for more than one token. Each output is bit-identical to the same ISA's
// vec_dot on that (row, token) pair: the tiles form the same integer block sums and run the same
// float accumulation (lane layout, accumulator split, horizontal sum, tail) per output; they only
// share each weight block's unpacking across tokens and each activation block across rows.
// So prefill, token-by-token decode and batched decode all give the same bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/kernels.h"

namespace k3 {

struct GemmKernel {
  // Bytes of one packed activation row of n elements: the vec_dot_type row followed by what the
  // tiles precompute from it once per call (re-biased codes, expanded scales). 0: the tiles read
  // the vec_dot_type rows as they are and pack is unused.
  size_t (*packed_size)(int64_t n);
  // a: one activation row in the weight's vec_dot_type; packed: packed_size(n) bytes, 64-aligned.
  void (*pack)(const void* a, void* packed, int64_t n);
  // y[t * ldy + r] = vec_dot(n, w + r * w_stride, activation t) for r < n_rows, t < n_tok, where
  // activation t is packed + t * p_stride (packed rows, or vec_dot_type rows when packed_size is
  // 0). n is a positive multiple of the weight and vec_dot_type block sizes.
  void (*run)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* packed,
              size_t p_stride, int64_t n_tok, float* y, int64_t ldy);
  // Decode, where it beats vec_dot on the vec_dot_type row: y[r] = vec_dot(n, w + r * w_stride,
  // activation) for r < n_rows, one token packed as for run. Null: decode uses vec_dot.
  void (*rows)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* packed, float* y) = nullptr;
  // Tokens matmul hands one run call (0: its default). A kernel that decodes each weight block once
  // per call (the lattice types) takes more, so that its decode serves all of them.
  int64_t tokens = 0;
  // The rows kernel splits the rows it is given into parts and runs one row of each at a time:
  // where every output is one chain of dependent FMAs (llama.cpp's order) that keeps several chains
  // in flight, each part one stream. Decode hands it a whole chunk of rows a call.
  bool rows_in_parts = false;
  // run for the products of a few tokens (matvec hands it a whole chunk of rows a call): tiles over
  // rows far apart (few_parts), each row one stream that the tile prefetches a step at a time as
  // decode rows do (or leaves to the hardware prefetcher where that measured faster: F32 at
  // AVX-512). Null: run, with the lines of each call requested before it.
  // (Prefill's run calls pass over each row tile once per token tile: their prefetches would be
  // paid several times.)
  decltype(run) few = nullptr;
};

// The tiled kernel for a weight type under an ISA, or null where there is none (then the
// per-(row, token) vec_dot is the product). Tiled today: F32, F16, BF16, Q8_0, Q4_0, Q5_0, IQ4_NL,
// MXFP4, Q2_K..Q6_K, the low-bit types (Q1_0, Q2_0, NVFP4, TQ1_0, TQ2_0, IQ3_XXS, IQ3_S, and the
// lattice types IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, which take 64 tokens a call) and the lane
// layouts Q8_0_X8, MXFP4_LANES, Q4_K_LANES (tensor/repack.h) on AVX2, AVX-VNNI and AVX-512; every
// level also has decode rows for the 32-element block types and the lane layouts (their 256-bit
// forms, AVX-512 included, but for Q8_0_X8's decode rows (and its tiles where 512-bit operations
// run at full width), MXFP4_LANES' tiles and Q4_K_LANES' rows and tiles, 512-bit there), and for
// F16, BF16, Q5_K, Q6_K and (256-bit) F32 where decode_in_parts (kernels.h) asks for two streams a
// thread (as the Q4_0, IQ4_NL and MXFP4 rows then take them).
const GemmKernel* gemm_kernel(GgmlType t, Isa isa);

// y[t * ldy + r] = vec_dot(n, w + r * w_stride, a + t * a_stride) for r < n_rows, t < n_tok,
// with a in the weight's vec_dot_type, on the calling thread under the active ISA: the tiled
// kernel where there is one (packing a into a per-thread buffer if it needs that), else one
// vec_dot per pair. The same bits either way.
void gemm_rows(GgmlType t, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_tok, float* y, int64_t ldy);

namespace detail {
const GemmKernel* gemm_kernel_avx512(GgmlType t);  // gemm_avx512.cpp
const GemmKernel* gemm_kernel_avx2(GgmlType t);    // gemm_avx2.cpp
const GemmKernel* gemm_kernel_avxvnni(GgmlType t); // gemm_avxvnni.cpp
}  // namespace detail

}  // namespace k3
