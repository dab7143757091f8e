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

  // Speculative decoding with a deterministic draft token (dspark.md §9.6). Greedy: the argmax,
  // accepted when it is the draft. Sampling: the draft is accepted with probability pi(draft),
  // pi the distribution sample() draws from for these logits; on a rejection the token is drawn
  // from pi without the draft, renormalised, so it has distribution pi either way.
  int32_t verify(const float* logits, int32_t n_vocab, int32_t draft, bool* accepted);

  struct Cand {
    int32_t id;
    float logit;
    float p;
  };
  // What sample() draws from (not for greedy): the candidates left by top-k, top-p and min-p with
  // their probabilities at the temperature, most likely first. Valid until the next call.
  const std::vector<Cand>& distribution(const float* logits, int32_t n_vocab);
  double uniform();  // [0, 1), portable across standard libraries

 private:
  SamplerParams p_;
  uint64_t s_[4];
  std::vector<Cand> cand_;
};

}  // namespace k3::model
