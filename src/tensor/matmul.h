// Matrix-vector and matrix-matrix products over weights of any computable type.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/threadpool.h"
#include "tensor/types.h"

namespace k3 {

// A 2-D weight in ggml order: ne1 rows (outputs) of ne0 contiguous inputs, rows nb1 bytes apart.
struct WeightView {
  GgmlType type;
  const void* data;
  int64_t ne0;  // inputs
  int64_t ne1;  // outputs
  size_t nb1;   // bytes between rows
};

// y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens. x is [n_tokens][ne0], y is [n_tokens][ne1].
// The activations are converted to the weight's vec_dot_type first, as llama.cpp does.
void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Several products of n_tokens tokens each in one parallel region (fewer fork/joins where each is
// small: a decode step, the rows of a speculative verify pass). Same bits as matmul() each.
struct MatmulJob {
  WeightView w;
  const float* x;
  float* y;
};
void matmul_batch(const MatmulJob* jobs, size_t n, int64_t n_tokens, ThreadPool& pool);
// The same, and then(job, r0, r1) once rows [r0, r1) of jobs[job]'s outputs (every token's) are
// final, so that work on them element by element runs inside the region: with few tokens (decode,
// a verify pass) after each chunk, on the thread that computed it; with more, once per job over all
// its rows, on the calling thread after the region.
using RowsReady = FnRef<void(size_t job, int64_t r0, int64_t r1)>;
void matmul_batch(const MatmulJob* jobs, size_t n, int64_t n_tokens, ThreadPool& pool, RowsReady then);

}  // namespace k3
