// An mmproj file loaded for running (vision.md §2–§3): hyperparameters from its metadata, every
// tensor of the registry checked (present, shape, a type k3 can compute with), the matrices used
// in place from the mapping, the small float tensors (norms, patch kernel, position table) held
// as float32 copies. Immutable; any number of Encoders share it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/matmul.h"
#include "vision/hparams.h"

namespace k3::vision {

struct VisionBlock {
  std::vector<float> ln1, ln2;  // [C]
  WeightView qkv, out, up, down;
};

struct VisionWeights {
  std::vector<float> patch;     // [C][3·p·p], each row in (channel, y, x) order
  std::vector<float> pos;       // [pos_h][pos_w][C]
  std::vector<VisionBlock> blocks;
  std::vector<float> post_ln;   // [C]
  WeightView mm1, mm2;
  std::vector<float> mm_norm;   // [n_proj]
};

class VisionModel {
 public:
  static std::unique_ptr<VisionModel> load(const std::string& path);
  const VisionHParams& hparams() const { return hp_; }
  const VisionWeights& weights() const { return w_; }
  const gguf::Model& file() const { return file_; }
  const std::string& path() const { return path_; }

 private:
  VisionModel() = default;
  std::string path_;
  gguf::Model file_;
  VisionHParams hp_;
  VisionWeights w_;
};

}  // namespace k3::vision
