// The lattice codebooks of IQ2_XXS, IQ2_XS, IQ2_S and IQ1_S/IQ1_M (docs/formats.md): entry k of a
// grid is 8 bytes (byte i of the little-endian u64 is value i), each one of three levels. The level
// tables (iq_grids_data.inc, generated from ggml's dequantizers by tools/gen_iq_grids.py) are what
// the quantizers search; the byte grids are what the dequantizers and dot products read.
#pragma once
#include <cstdint>

namespace k3 {

namespace iq {
#include "tensor/iq_grids_data.inc"
}  // namespace iq

inline constexpr int8_t kIq2Values[3] = {8, 25, 43};  // IQ2 levels 0, 1, 2

struct IqGrids {
  uint64_t iq2xxs[256];  // IQ2 values 8, 25, 43
  uint64_t iq2xs[512];
  uint64_t iq2s[1024];
  uint64_t iq1s[2048];  // IQ1 levels 0, 1, 2 (the value is the level − 1)
  // Byte i of signs[s] is −1 where bit i of iq::kIqSigns[s] is set (value i negative), else +1.
  uint64_t signs[128];
  // IQ1_M, 32 values with shift bits b (bit g: group g of 8 shifts by −1/8): byte j is 0 where bit
  // j / 8 is set, else 2 (the shift + 1).
  uint8_t iq1m_shift[16][32];
};
extern const IqGrids kIqGrids;  // constant-initialised (no start-up code)

}  // namespace k3
