// Products of one token (decode) or a few (the rows of a speculative verify pass): several of them
// in one parallel region, against activations quantized once by the caller, each weight row read
// once for all of a product's tokens. Each output is one vec_dot, exactly as matmul computes it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/matmul.h"
#include "tensor/threadpool.h"

namespace k3 {

// y = W x for one token, x already in the weight's vec_dot_type (quantize_activation); for n_tok
// tokens, token t's activation at xq + t * xstride bytes and its outputs at y + t * ldy.
struct Matvec {
  WeightView w;
  const void* xq;
  float* y;
  int64_t n_tok = 1;
  size_t xstride = 0;
  int64_t ldy = 0;
};

// x (n floats) converted to the vec_dot_type of weights of type `wtype` into `buf` (grown as needed),
// as matmul converts it; returns x itself when that type is F32. n must suit the type's block size.
const void* quantize_activation(GgmlType wtype, const float* x, int64_t n, std::vector<uint8_t>& buf);

// Runs mv[0..n) in one region. Consecutive runs of `group` (<= 8) products (equal ne1) form a group; the
// rows of every group are cut into chunks (decode_chunks, kernels.h; a multiple of `row_align` rows),
// claimed dynamically, and a chunk covers the same rows [r0, r1) of each product of its group, read
// row by row across the group. After a chunk, then(g, r0, r1) runs on the same thread (may be empty),
// so the group's outputs for those rows can be combined there. Products under 64 KB in all run on
// the calling thread.
void matvec_batch(const Matvec* mv, size_t n, size_t group, ThreadPool& pool, int64_t row_align,
                  FnRef<void(size_t g, int64_t r0, int64_t r1)> then);
void matvec_batch(const Matvec* mv, size_t n, size_t group, ThreadPool& pool);
// mv[0..n) (n <= 8) on the calling thread alone, one after the other, with the kernels
// matvec_batch takes (the same bits): for a region's thread that computes products of its own.
// packs: the activations packed for those kernels, kept by the caller (one per concurrent work
// item, not per thread), so that whichever thread runs an item allocates nothing once warm.
using MatvecPacks = std::vector<std::vector<uint8_t>>;
void matvec_here(const Matvec* mv, size_t n, MatvecPacks& packs);

}  // namespace k3
