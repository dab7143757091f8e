// `k3 convert` of a DSpark draft checkpoint (dspark.md §3.3): config.json (model_type k3_dspark)
// and its safetensors to one `kimi-k3-dspark` GGUF, losslessly: bytes copied unchanged except the
// gains (widened to F32) and kv_b_proj (split per head into attn_k_b / attn_v_b as K3's is). The
// file is written under a temporary name and renamed when complete.
#pragma once
#include <cstdint>
#include <string>

namespace k3::convert {

// Whether dir holds a DSpark draft checkpoint (its config.json says model_type k3_dspark).
bool is_dspark_checkpoint(const std::string& dir);

struct DraftConvertOptions {
  std::string src;          // checkpoint directory
  std::string out;          // output GGUF path
  bool no_embd = false;     // leave token_embd out (the target's is used; the released one equals it)
  uint32_t block_size = 7;  // the largest block k3 will accept
  std::string name;         // general.name (default: the directory's name)
};

// Throws k3::Error naming the file, field or tensor for anything the format does not allow.
void convert_dspark(const DraftConvertOptions& o);

}  // namespace k3::convert
