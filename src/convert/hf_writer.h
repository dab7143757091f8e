// Synthetic Hugging Face Kimi-K3 checkpoints in the real layout (conversion.md §1), written from a
// K3 GGUF model — in practice the one `k3 make-tiny` has just written, so both hold the same
// weights and `k3 convert` of the checkpoint must give the GGUF's tensors back byte for byte.
// Every converter transform is inverted: ssm_a -> a padded A_log with −exp(A_log) == ssm_a
// exactly, score vectors -> norm/proj pairs whose float32 product is exact, conv -> [D, 1, K],
// k_b/v_b -> kv_b_proj, expert stacks -> per-expert matrices or MXFP4 weight_packed/weight_scale.
// Also written: config.json (real field names, nested text_config), the index, tiktoken.model,
// tokenizer_config.json, generation_config.json; with an mmproj, the vision shards (vision.md §2).
#pragma once
#include <string>

#include "gguf/gguf.h"

namespace k3::convert {

struct HfLayout {
  std::string mmproj;       // an mmproj GGUF: its tower and projector become the last two shards (blocks,
                            // then the rest) with the checkpoint's interleaved Q/K rows, and config.json
                            // gets its vision_config
  bool scatter = false;     // AttnRes proj halves and the upper half of every expert stack go to the
                            // next shard, so tensors span shards (conversion.md §6)
  bool conv_2d = false;     // conv weights as [D, K] instead of the real [D, 1, K]
  bool scale_e8m0 = true;   // MXFP4 scales as F8_E8M0 (else U8; both occur)
  bool chat_template = false;  // copy tokenizer.chat_template into tokenizer_config.json (K3 has none)
};

// Writes the checkpoint into `dir` (created; existing files of the same names are replaced).
// Throws k3::Error for a model the HF format cannot hold losslessly (e.g. Q8_0 weights).
void write_hf_checkpoint(const gguf::Model& m, const std::string& dir, const HfLayout& layout = {});
void write_hf_checkpoint(const std::string& gguf_path, const std::string& dir, const HfLayout& layout = {});

// The A_log value whose float32 −exp is exactly `ssm_a`; throws if none exists near log(−ssm_a).
float alog_from_ssm_a(float ssm_a);

}  // namespace k3::convert
