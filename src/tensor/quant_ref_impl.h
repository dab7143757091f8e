// Helpers shared by the reference quantizers (quant_ref_*.cpp); quant-formats.md §2 and §6.1.
// Include first in those files: byte parity with ggml needs every float operation rounded on
// its own, in source order, so a*b + c must never be fused into an FMA (even under -mfma).
#pragma once
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "tensor/quant_ref_search.h"
#include "tensor/types.h"

namespace k3::ref::detail {

constexpr float GROUP_MAX_EPS = 1e-15f;

// Round to nearest, ties to even: adding 1.5*2^23 leaves round(f) in the low mantissa bits.
// Valid for |f| <= 4194303 (and, like ggml, silently wrong beyond).
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// The element with the largest |x|: strict > from 0, so the first wins ties and keeps its sign;
// an all-zero group gives max = +0.
struct AbsMax {
  float amax = 0;
  float max = 0;
};
inline AbsMax abs_max(const float* x, int n) {
  AbsMax m;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > m.amax) {
      m.amax = ax;
      m.max = x[i];
    }
  }
  return m;
}

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The search routines of §6.1: quant_ref_search.h.

// The search structure of a lattice type's grid (docs/formats.md, "Lattice quantizer search"). The
// quantizers round each group of 8 values to levels 0-2 and name the pattern by u = sum of
// level_i << 2i. A pattern on the grid has its entry; any other has its neighbours, the entries at
// the `nwant` smallest squared distances from it (IQ2_XXS, IQ2_XS: 2; IQ2_S: 1; IQ1_S, IQ1_M: 3),
// in order of distance, then index. Distances are between the points 2·level + 1.
class Lattice {
 public:
  Lattice(const uint16_t* levels, int size, int nwant);
  // The grid index of pattern u, or -1 when it is not on the grid.
  int index(uint16_t u) const { return map_[u]; }
  std::span<const uint16_t> neighbours(uint16_t u) const {
    const uint32_t b = first_[u];
    return {neigh_.data() + b, first_[u + 1] - b};
  }
  // Level (0-2) of value i of entry k.
  int level(int k, int i) const { return (levels_[k] >> (2 * i)) & 3; }
  // The neighbour of off-grid pattern u nearest to x under weights w at `scale`, level l standing
  // for value[l]; writes its levels to L and returns its index. Ties keep the earlier neighbour.
  int nearest_neighbour(uint16_t u, const float* x, const float* w, float scale, const float* value, int8_t* L) const;
  int size() const { return size_; }

 private:
  static constexpr int kPatterns = 1 << 16;
  const uint16_t* levels_;
  int size_;
  std::vector<int32_t> map_;
  std::vector<uint32_t> first_;  // neighbours of u: neigh_[first_[u] .. first_[u + 1])
  std::vector<uint16_t> neigh_;
};
// The lattice of IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S or IQ1_M, built on first use (thread-safe).
const Lattice& lattice(GgmlType t);

// Throws k3::Error naming t and `k3 imatrix` when qw is null (types that need an importance matrix).
void require_imatrix(GgmlType t, const float* qw);

// Pattern code of 8 levels.
inline uint16_t lattice_code(const int8_t* L) {
  uint16_t u = 0;
  for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | L[i] << (2 * i));
  return u;
}

}  // namespace k3::ref::detail
