// Full (unmasked) multi-head attention over the patches of one image (vision.md §5), blocked as
// flash attention: kQ queries at a time against kK keys at a time with the online softmax, so the
// memory per thread is a kQ × kK score tile whatever the image size; the patches² score matrix is
// never formed. Both products through sgemm (tensor/sgemm.h).
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/threadpool.h"

namespace k3::vision {

// qkv: [n][3·H·D] rows (q | k | v, head h at h·D within each part), RoPE already applied.
// kt: scratch of H·D·n floats (K transposed per head). o: [n][H·D], o = softmax(q·kᵀ/√D)·v per head.
void attention(const float* qkv, int64_t n, int64_t n_head, int64_t head_dim, std::vector<float>& kt, float* o,
               ThreadPool& pool);

// The plain reference: every score row formed in full, sums in double.
void attention_ref(const float* qkv, int64_t n, int64_t n_head, int64_t head_dim, float* o);

}  // namespace k3::vision
