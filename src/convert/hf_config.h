// config.json of a Hugging Face Kimi-K3 checkpoint (conversion.md §1.3): `text_config` merged over
// the top level, mapped to the model's HParams. A missing or mistyped field is an error naming
// config.json and the field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "model/hparams.h"

namespace k3::convert {

struct HfConfig {
  std::string path;
  model::HParams hp;               // presence features (attn gate, routed norm, shexp) not yet set
  uint32_t n_kv_heads = 0;         // num_key_value_heads: splits kv_b_proj
  bool mxfp4 = false;              // quantization_config selects the compressed-tensors MXFP4 path
  std::optional<int64_t> eos_token_id;
  std::string name;                // a model name if the config has one (else empty)
};

HfConfig read_hf_config(const std::string& path);

// The inverse, for synthetic checkpoints: a config.json text with the real field names.
std::string hf_config_json(const model::HParams& hp, bool mxfp4, std::optional<int64_t> eos_token_id);

}  // namespace k3::convert
