// The target's stream leaving the draft's tap layers (dspark.md §4), captured during a forward
// pass through the model's named intermediates: `l_out` of layer L is h after layer L (the AttnRes
// prefix sum, the restarted sum on a banking layer). The model is not told about drafts.
#pragma once
#include <cstdint>
#include <vector>

#include "model/trace.h"

namespace k3::spec {

class Taps : public model::Trace {
 public:
  Taps(const std::vector<uint32_t>& layers, uint32_t n_layer, int64_t n_embd);
  // Row r of the last pass's batch: [layers][H], in the order of `layers`.
  const float* row(int64_t r) const { return rows_.data() + r * width_; }
  int64_t width() const { return width_; }
  void record(const char* name, int il, const float* data, int64_t T, int64_t n) override;

 private:
  std::vector<int> slot_;  // per target layer: its place among the taps, or -1
  int64_t H_, width_;
  std::vector<float> rows_;  // [T][width]
};

}  // namespace k3::spec
