// The mmproj tensors (vision.md §2), one list shared by the converter, make-tiny, the Hugging Face
// writer, the loader and the quantizer: GGUF name, checkpoint name, ggml shape from the
// hyperparameters, and the one transform (the Q/K row permutation of attn_qkv).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vision/hparams.h"

namespace k3::vision {

enum class VTransform : uint8_t { Copy, PermuteQK };

struct VTensor {
  std::string name;            // GGUF
  std::string hf;              // checkpoint
  std::vector<int64_t> ne;     // ggml order; the checkpoint shape is its reverse
  VTransform xf = VTransform::Copy;
  bool matrix = false;         // a product's weight (quantizable); else a norm, the patch kernel or the table
  int layer = -1;              // block, or -1
};

// In file order: patch kernel, position table, the blocks' 6 each, post_ln, the projector's 3.
void for_each_vision_tensor(const VisionHParams& hp, const std::function<void(const VTensor&)>& fn);

// Whether a GGUF tensor name belongs to an mmproj file (clip conventions: "v." and "mm.").
bool is_vision_tensor_name(const std::string& name);
// Whether a checkpoint tensor name belongs to the vision tower or projector.
bool is_vision_source_name(const std::string& name);

// The Q/K row permutation (vision.md §3): the checkpoint row of attn_qkv that lands in row `row` of
// the mmproj (interleaved RoPE pairs -> split halves per head; V rows stay).
int64_t qkv_source_row(int64_t row, const VisionHParams& hp);

}  // namespace k3::vision
