// Lossless repack of compressed-tensors MXFP4 (`weight_packed` + `weight_scale`, group 32) into
// ggml block_mxfp4 (conversion.md §4): the scale byte is copied, and within each group of 32 the
// nibbles move from element order (byte t = elements 2t | 2t+1 << 4) to ggml's split order
// (byte j = elements j | j+16 << 4). Codes keep their meaning, so the dequantized values agree
// bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace k3::convert {

// One group: 16 packed source bytes and its scale -> one 17-byte block_mxfp4.
void mxfp4_repack_group(const uint8_t* packed16, uint8_t scale, uint8_t* block17);

// `rows` rows of `cols` logical elements (cols % 32 == 0): packed [rows, cols/2], scales
// [rows, cols/32], out [rows, cols/32 blocks of 17 bytes].
void mxfp4_repack_rows(const uint8_t* packed, const uint8_t* scales, uint8_t* out, int64_t rows, int64_t cols);

// The inverse (synthetic checkpoints): block_mxfp4 rows -> packed + scales.
void mxfp4_unpack_rows(const uint8_t* blocks, uint8_t* packed, uint8_t* scales, int64_t rows, int64_t cols);

// Source-format reference decode of one group (E2M1 value × 2^(e−127)), for tests.
void mxfp4_source_dequant_group(const uint8_t* packed16, uint8_t scale, float* out32);

}  // namespace k3::convert
