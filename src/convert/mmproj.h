// The mmproj part of a conversion (vision.md §2–§3): the vision tower and projector of the vision
// shards, every tensor in its own type and bytes except the Q/K row permutation of attn_qkv,
// with clip / kimik3 metadata. Hyperparameters from config.json's vision_config where given,
// else from the shapes, which win when both exist (each disagreement becomes a note).
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/plan.h"
#include "vision/hparams.h"

namespace k3::convert {

struct VisionSource {
  SrcRef ref;
  std::string full;  // checkpoint name
};

// Adds the mmproj tensors and its part (the last of p.parts) to the plan. `sources`: every vision
// tensor of the checkpoint by name. Throws naming the shard and tensor for anything missing,
// mis-shaped, of a non-float type or unknown.
void plan_mmproj(Plan& p, const std::map<std::string, VisionSource>& sources, const nlohmann::json& config,
                 const std::string& config_path, const std::string& name);

// vision_config for a synthetic checkpoint (the Kimi-VL / K2.5 field names of vision.md §2).
nlohmann::json vision_config_json(const vision::VisionHParams& hp);

// Name of the mmproj file: mmproj-<name>-<TYPE>.gguf.
std::string mmproj_file_name(const std::string& name, GgmlType type);

}  // namespace k3::convert
