#include "model/embedding.h"

#include "tensor/kernels.h"

namespace k3::model {

void embed(const Tensor& token_embd, const int32_t* ids, int64_t T, float* x) {
  const int64_t H = token_embd.ne[0];
  const QuantKernels& k = kernels(token_embd.type);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = ids[t] - token_embd.first;
    if (r >= 0 && r < token_embd.ne[1])
      k.to_float(token_embd.data + static_cast<size_t>(r) * token_embd.row_bytes(), x + t * H, H);
  }
}

}  // namespace k3::model
