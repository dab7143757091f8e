#include "model/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace k3::model {

static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Sampler::Sampler(const SamplerParams& p) : p_(p) {
  if (p.top_p <= 0.0f) fail("top-p must be in (0, 1] (got %g)", p.top_p);
  if (p.min_p < 0.0f || p.min_p > 1.0f) fail("min-p must be in [0, 1] (got %g)", p.min_p);
  uint64_t x = p.seed;
  for (auto& s : s_) s = splitmix64(x);
}

double Sampler::uniform() {  // xoshiro256**
  auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

int32_t Sampler::argmax(const float* logits, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

const std::vector<Sampler::Cand>& Sampler::distribution(const float* logits, int32_t n) {
  cand_.resize(n);
  for (int32_t i = 0; i < n; ++i) cand_[i] = {i, logits[i], 0.0f};
  auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  std::sort(cand_.begin(), cand_.end(), by_logit);
  if (p_.top_k > 0 && p_.top_k < n) cand_.resize(p_.top_k);
  auto softmax = [&](float temp) {
    const float mx = cand_.front().logit;
    double s = 0;
    for (auto& c : cand_) s += (c.p = std::exp((c.logit - mx) / temp));
    for (auto& c : cand_) c.p = static_cast<float>(c.p / s);
  };
  softmax(1.0f);
  if (p_.top_p < 1.0f) {  // smallest prefix with mass >= top_p
    double cum = 0;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
      cum += cand_[i].p;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    cand_.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    const float floor = cand_.front().p * p_.min_p;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].p >= floor) ++keep;
    cand_.resize(keep);
  }
  softmax(p_.temp);
  return cand_;
}

int32_t Sampler::sample(const float* logits, int32_t n) {
  if (p_.temp <= 0.0f) return argmax(logits, n);
  distribution(logits, n);
  double u = uniform(), cum = 0;
  for (const auto& c : cand_) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return cand_.back().id;
}

int32_t Sampler::verify(const float* logits, int32_t n, int32_t draft, bool* accepted) {
  if (p_.temp <= 0.0f) {
    const int32_t g = argmax(logits, n);
    *accepted = g == draft;
    return g;
  }
  distribution(logits, n);
  double pd = 0, rest = 0;
  for (const auto& c : cand_) (c.id == draft ? pd : rest) += c.p;
  *accepted = uniform() < pd;
  if (*accepted) return draft;
  const double u = uniform() * rest;
  double cum = 0;
  int32_t last = -1;
  for (const auto& c : cand_) {
    if (c.id == draft) continue;
    cum += c.p;
    last = c.id;
    if (u < cum) return c.id;
  }
  return last;
}

}  // namespace k3::model
