// The DSpark draft GGUF `kimi-k3-dspark` (dspark.md §3): its keys, the one table of its tensors
// (GGUF name, Hugging Face source, shape, allowed types) that the loader, the converter and the
// quantizer share, and the fit check against a target (§3.4).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/weights.h"

namespace k3::model {
class Model;
}

namespace k3::spec {

inline constexpr const char* kDraftArch = "kimi-k3-dspark";

struct DraftParams {
  uint32_t n_layer = 0, n_embd = 0, n_ff = 0, n_ctx = 0, n_vocab = 0;
  uint32_t n_head = 0, q_lora = 0, kv_lora = 0;
  uint32_t d_nope = 0, d_rope = 0, d_v = 0;  // d_qk = d_nope + d_rope
  float eps = 1e-5f;
  // RoPE (§7): yarn = false is plain RoPE
  float rope_base = 10000.0f;
  bool yarn = false;
  float yarn_factor = 1.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f, yarn_mscale = 1.0f,
        yarn_mscale_all_dim = 1.0f;
  uint32_t yarn_orig_ctx = 0;
  std::vector<uint32_t> taps;  // target_layer_ids, in concatenation order
  uint32_t target_embd = 0, target_layers = 0;
  uint32_t mask_id = 0, markov_rank = 0, block_size = 7;

  uint32_t d_qk() const { return d_nope + d_rope; }
  uint32_t row() const { return kv_lora + d_rope; }  // context row: [c_hat | k_hat]
  // Reads and checks every kimi-k3-dspark.* key (exact types; errors name the key).
  static DraftParams from_metadata(const gguf::Metadata& meta);
  // The keys back (the converter; round trip in the tests).
  void to_metadata(gguf::Metadata& meta) const;
};

struct DraftLayerWeights {
  model::Tensor attn_norm, ffn_norm, q_a, q_a_norm, q_b, kv_a, kv_a_norm, k_b, v_b, wo, ffn_gate, ffn_up, ffn_down;
};
struct DraftWeights {
  model::Tensor token_embd;  // may be empty: the target's
  model::Tensor output_norm, context_proj, context_norm, markov_w1, markov_w2;
  std::vector<DraftLayerWeights> layers;
};

enum class DraftRule : uint8_t {
  F32,      // gains
  Matrix,   // any type k3 computes whose block divides ne0
  PerHead,  // attn_k_b / attn_v_b: F32, F16, BF16 or Q8_0
};
enum class DraftSource : uint8_t { Copy, Gain, SplitKb, SplitVb };  // the converter's transform

struct DraftTensor {
  std::string name;  // GGUF
  std::string hf;    // safetensors name
  std::vector<int64_t> ne;
  DraftRule rule;
  DraftSource src;
  bool optional = false;  // token_embd
  model::Tensor DraftWeights::*global = nullptr;      // the field it binds, or
  model::Tensor DraftLayerWeights::*layer = nullptr;  // layer il's
  uint32_t il = 0;
};
// Every tensor of a draft with these parameters, in file order (§3.2).
std::vector<DraftTensor> draft_tensors(const DraftParams& p);
// Whether a tensor of rule r may be stored as t (reason in *why if not).
bool draft_type_allowed(DraftRule r, GgmlType t, int64_t ne0, std::string* why);

// Binds every tensor (missing, mis-shaped, wrong-type and unexpected tensors are errors naming it).
DraftWeights bind_draft(const gguf::Model& file, const DraftParams& p);

// §3.4: throws k3::Error naming the first rule the pair breaks. block = the block size asked for.
void check_fit(const DraftParams& p, const DraftWeights& w, const model::Model& target, uint32_t block,
               const std::string& draft_path);

}  // namespace k3::spec
