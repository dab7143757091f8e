// The ggml tensor types a GGUF file can name (quant-formats.md §1): one table drives all
// block-size arithmetic. `known` types may appear in a file; `computable` ones have kernels here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace k3 {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
  // k3's own layouts, never in a file (the GGUF reader and writer refuse them): rows repacked at
  // load for the SIMD kernels (blocks.h, block_q8_0x8 and block_mxfp4x8; tensor/repack.h), and
  // Q2_K_SB: Q2_K's bytes summed per super-block, in the order of llama.cpp's repacked Q2_K;
  // Q4_K_LANES: Q4_K super-blocks laid out so that int32 lane l sums sub-block l (block_q4_Kl).
  Q4_K_LANES = 60, Q2_K_SB = 61, Q8_0_X8 = 62, MXFP4_LANES = 63,
};

struct TypeInfo {
  GgmlType type;
  const char* name;     // ggml's lower-case name, e.g. "q4_K", "mxfp4"
  int64_t block;        // elements per block
  size_t block_bytes;   // bytes per block
  bool computable;      // dequantize/dot kernels exist in k3
};

// A type a file may name: nullptr for an id that is unknown, retired (4, 5, 31-33, 36-38) or
// k3's own (Q4_K_LANES, Q2_K_SB, Q8_0_X8, MXFP4_LANES).
const TypeInfo* type_info(uint32_t id);
// Any type, k3's own included: nullptr (find_type) or an assertion (type_info) if unknown.
const TypeInfo* find_type(GgmlType t);
const TypeInfo& type_info(GgmlType t);
// Case-insensitive lookup among the file types by name ("Q4_K", "q4_k", "mxfp4"); nullptr if unknown.
const TypeInfo* type_by_name(std::string_view name);
inline const char* type_name(GgmlType t) { return type_info(t).name; }

// Bytes of one row of ne0 elements; ne0 must be a multiple of the block size.
inline size_t row_size(GgmlType t, int64_t ne0) {
  const TypeInfo& ti = type_info(t);
  return static_cast<size_t>(ne0 / ti.block) * ti.block_bytes;
}

}  // namespace k3
