// The byte grids of tensor/iq_grids.h, expanded from the level tables at compile time.
#include "tensor/iq_grids.h"

#include <cstddef>

namespace k3 {

namespace {
constexpr int8_t kLevels[3] = {0, 1, 2};

template <size_t N>
constexpr void expand(const uint16_t (&levels)[N], const int8_t (&values)[3], uint64_t (&grid)[N]) {
  for (size_t k = 0; k < N; ++k) {
    grid[k] = 0;
    for (int i = 0; i < 8; ++i)
      grid[k] |= static_cast<uint64_t>(static_cast<uint8_t>(values[(levels[k] >> (2 * i)) & 3])) << (8 * i);
  }
}

constexpr IqGrids make_grids() {
  IqGrids g{};
  expand(iq::kIq2xxsLevels, kIq2Values, g.iq2xxs);
  expand(iq::kIq2xsLevels, kIq2Values, g.iq2xs);
  expand(iq::kIq2sLevels, kIq2Values, g.iq2s);
  expand(iq::kIq1sLevels, kLevels, g.iq1s);
  for (int s = 0; s < 128; ++s)
    for (int i = 0; i < 8; ++i) g.signs[s] |= uint64_t{(iq::kIqSigns[s] >> i) & 1 ? 0xFFu : 0x01u} << (8 * i);
  for (int b = 0; b < 16; ++b)
    for (int j = 0; j < 32; ++j) g.iq1m_shift[b][j] = (b >> (j / 8)) & 1 ? 0 : 2;
  return g;
}
}  // namespace

constinit const IqGrids kIqGrids = make_grids();

}  // namespace k3
