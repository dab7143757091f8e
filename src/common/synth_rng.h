// Deterministic normal and uniform draws for synthetic weights (splitmix64 + Box-Muller): a
// tensor's values depend only on the seed, its name and its shape, not on the order of writing or
// the threads.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace k3 {

struct SynthRng {
  uint64_t s;
  bool have = false;
  double spare = 0;
  // Chunk c of a tensor has its own stream (chunk 0's is the tensor's), so chunks can be generated
  // in any order and on any thread.
  SynthRng(uint64_t seed, const std::string& name, uint64_t chunk = 0) : s(seed * 0x9E3779B97F4A7C15ull + 0x1234567) {
    for (unsigned char c : name) s = (s ^ c) * 0x100000001B3ull;
    s += chunk * 0xD1B54A32D192ED03ull;
  }
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() {
    if (have) {
      have = false;
      return spare;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
    spare = r * std::sin(a);
    have = true;
    return r * std::cos(a);
  }
};

}  // namespace k3
