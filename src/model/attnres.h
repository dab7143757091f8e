// Cross-layer Attention Residuals (model.md §6.2): the per-token bank of banked streams and the
// softmax mix over [bank..., current]. The bank lives for one forward pass only.
#pragma once
#include <cstdint>
#include <vector>

namespace k3::model {

// Bank entries for the T tokens of a batch, in push order; each entry is [T][H].
struct Bank {
  int64_t T = 0, H = 0;
  std::vector<std::vector<float>> entries;
  void push(const float* h) { entries.emplace_back(h, h + T * H); }
  bool empty() const { return entries.empty(); }
};

// out[T][H] = Mix(bank, c, w): passthrough (copy) if the bank is empty; else scores
// z_j = dot(rmsnorm(s_j), w) over sources [bank..., c], p = softmax(z), out = sum_j p_j s_j with
// the bank part accumulated in bank order and p_n * c added last. out may not alias c.
void attnres_mix(const Bank& bank, const float* c, const float* w, float eps, float* out);

}  // namespace k3::model
