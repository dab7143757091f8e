// Cross-layer Attention Residuals (model.md §6.2): the per-token bank of banked streams and the
// softmax mix over [bank..., current]. The bank lives for one forward pass only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace k3::model {

struct Ctx;

// Bank entries for the T tokens of a batch, in push order; each entry is [T][H]. The first n
// entries are in use; reset() keeps the memory of all of them for the next pass. An entry is
// complete once added (add(), push()) and not changed after.
struct Bank {
  int64_t T = 0, H = 0;
  size_t n = 0;
  std::vector<std::vector<float>> entries;
  // rms_scale of each token's row of the first `scaled` entries under `scale_eps` (attnres_mix):
  // an entry's rmsnorm sums its squares once, not at every mix after it.
  std::vector<std::vector<float>> scales;
  size_t scaled = 0;
  float scale_eps = 0.0f;
  void reset(int64_t t, int64_t h) { T = t, H = h, n = 0, scaled = 0; }
  float* add() {  // a new entry, contents unspecified
    if (n == entries.size()) entries.emplace_back();
    entries[n].resize(T * H);
    return entries[n++].data();
  }
  void push(const float* h) { std::copy_n(h, T * H, add()); }
  bool empty() const { return n == 0; }
};

// out[T][H] = Mix(bank, c, w): passthrough (copy) if the bank is empty; else scores
// z_j = dot(rmsnorm(s_j), w) over sources [bank..., c], p = softmax(z), out = sum_j p_j s_j with
// the bank part accumulated in bank order and p_n * c added last, the tokens split over ctx's
// threads. out may not alias c.
void attnres_mix(Ctx& ctx, Bank& bank, const float* c, const float* w, float eps, float* out);

}  // namespace k3::model
