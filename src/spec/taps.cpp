#include "spec/taps.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace k3::spec {

Taps::Taps(const std::vector<uint32_t>& layers, uint32_t n_layer, int64_t n_embd)
    : slot_(n_layer, -1), H_(n_embd), width_(static_cast<int64_t>(layers.size()) * n_embd) {
  for (size_t i = 0; i < layers.size(); ++i) slot_.at(layers[i]) = static_cast<int>(i);
}

void Taps::record(const char* name, int il, const float* data, int64_t T, int64_t n) {
  if (il < 0 || slot_[il] < 0 || std::strcmp(name, "l_out") != 0) return;
  K3_ASSERT(n == H_);
  rows_.resize(T * width_);  // every tap layer of a pass sees the same T rows
  for (int64_t t = 0; t < T; ++t) std::copy_n(data + t * H_, H_, rows_.data() + t * width_ + slot_[il] * H_);
}

}  // namespace k3::spec
