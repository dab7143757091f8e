// MoonViT hyperparameters (vision.md §1, §3): read from and written to the clip.* / k3.vision.*
// keys of an mmproj GGUF. Widths the keys do not carry (position table, projector hidden width)
// come from the tensor shapes.
#pragma once
#include <cstdint>
#include <string>

#include "gguf/gguf.h"

namespace k3::vision {

inline constexpr const char* kArch = "clip";
inline constexpr const char* kProjectorType = "kimik3";

enum class PosInterp : uint8_t { Bicubic, Bilinear };
const char* interp_name(PosInterp p);

struct VisionHParams {
  uint32_t patch = 14;                 // pixels per patch side
  uint32_t n_embd = 1024;              // C
  uint32_t n_head = 12, head_dim = 128;
  uint32_t n_ff = 4096;                // F
  uint32_t n_layer = 27;
  uint32_t pos_h = 64, pos_w = 64;     // learned position table
  uint32_t merge = 2;                  // 2 x 2 spatial merge
  uint32_t proj_hidden = 4096;         // mm.1 outputs
  uint32_t n_proj = 7168;              // text-model width
  float eps = 0.0078125f;              // ε_v (blocks and post_ln)
  float proj_eps = 1e-5f;              // ε_p (mm.post_norm)
  float rope_theta = 10000.0f;
  PosInterp interp = PosInterp::Bicubic;
  uint32_t in_patch_limit = 65536;
  float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};

  uint32_t qkv_width() const { return n_head * head_dim; }  // 1536 (≠ C)
  uint32_t merged_width() const { return merge * merge * n_embd; }
  // Throws k3::Error naming the first impossible value.
  void validate() const;
  // Every key of vision.md §3 (general.* included).
  void to_metadata(gguf::Metadata& m) const;
  // pos_h, pos_w and proj_hidden are left at their defaults (the loader takes them from shapes).
  static VisionHParams from_metadata(const gguf::Metadata& m);
  std::string summary() const;
};

}  // namespace k3::vision
