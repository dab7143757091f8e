// Token sampling: greedy at temperature 0; otherwise top-k -> top-p -> min-p -> temperature ->
// a draw from the softmax with a seeded RNG (the order llama.cpp's default chain uses).
#pragma once
#include <cstdint>
#include <vector>

namespace k3::model {

struct SamplerParams {
  float temp = 0.0f;   // <= 0: greedy
  int32_t top_k = 0;   // <= 0: off
  float top_p = 1.0f;  // >= 1: off
  float min_p = 0.0f;  // <= 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // logits: n_vocab values of one position.
  int32_t sample(const float* logits, int32_t n_vocab);
  static int32_t argmax(const float* logits, int32_t n_vocab);  // lowest id on ties

 private:
  double uniform();  // [0, 1), portable across standard libraries
  SamplerParams p_;
  uint64_t s_[4];
  struct Cand {
    int32_t id;
    float logit;
    float p;
  };
  std::vector<Cand> cand_;
};

}  // namespace k3::model
