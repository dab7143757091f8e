// Random-initialised vision towers with the MoonViT structure (make-tiny --vision, tests,
// benchmarks): an mmproj GGUF written through the registry. Matrices N(0, 1/fan_in), norms
// N(1, 0.1), patch kernel N(0, 1/588), position table N(0, 0.5): well-conditioned outputs.
#pragma once
#include <cstdint>
#include <string>

#include "tensor/types.h"
#include "vision/hparams.h"

namespace k3::vision {

struct VisionSynthOptions {
  VisionHParams hp;            // proj_hidden and pos_h/pos_w are used as given
  GgmlType type = GgmlType::BF16;  // every tensor (the checkpoint's type)
  uint64_t seed = 1;
  std::string name = "k3-synthetic-vision";
};

// Small by default: 2 blocks, width 64, 2 heads x 48 (qkv 96 ≠ width), MLP 128, table 16 x 16,
// projector 256 -> 256 -> n_proj. "k3": K3's real dimensions (vision.md §1) with n_proj 7168.
VisionSynthOptions vision_synth_preset(const std::string& preset, uint32_t n_proj);

void write_synthetic_mmproj(const std::string& path, const VisionSynthOptions& o);

}  // namespace k3::vision
