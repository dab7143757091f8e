// Kimi-K3 hyperparameters (gguf-contract.md §3, model.md §2-§3): read strictly from the
// `kimi-k3.*` keys, checked for consistency, and writable back to metadata (make-tiny and the
// converter use the same code, so what is written is what is read).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace k3::model {

inline constexpr const char* kArch = "kimi-k3";

enum class AttnKind : uint8_t { KDA, MLA };
enum class FfnKind : uint8_t { Dense, MoE };
enum class Gating : uint32_t { Softmax = 1, Sigmoid = 2 };

struct HParams {
  // ---- from kimi-k3.* keys ----
  uint32_t n_ctx_train = 0;            // context_length
  uint32_t n_embd = 0;                 // H, embedding_length
  uint32_t n_layer = 0;                // L, block_count
  uint32_t n_vocab = 0;                // V: token list length (vocab_size key as fallback)
  std::vector<uint32_t> n_head;        // attention.head_count, per layer
  std::vector<uint32_t> n_head_kv;     // attention.head_count_kv, per layer: 0 => KDA, > 0 => MLA
  std::vector<uint32_t> n_ff;          // feed_forward_length, per layer (dense layers)
  float rms_eps = 0;                   // attention.layer_norm_rms_epsilon

  // MLA
  uint32_t n_embd_head_k_mla = 0;      // d_qk, attention.key_length_mla
  uint32_t n_embd_head_v_mla = 0;      // d_v, attention.value_length_mla
  uint32_t q_lora_rank = 0;            // r_q, attention.q_lora_rank (0: plain attn_q)
  uint32_t kv_lora_rank = 0;           // r_kv
  uint32_t n_rot = 0;                  // d_pe, rope.dimension_count (never rotated)

  // KDA
  uint32_t ssm_d_conv = 0;             // K_conv, ssm.conv_kernel
  uint32_t kda_head_dim = 0;           // d, kda.head_dim
  std::optional<float> kda_gate_lb;    // kda.gate_lower_bound (absent: softplus gate)

  // MoE
  uint32_t n_expert = 0;               // E
  std::vector<uint32_t> n_expert_used; // k, per layer
  std::vector<uint32_t> n_ff_exp;      // f_e, per layer
  uint32_t n_expert_shared = 0;        // shared width = f_e * n_expert_shared
  uint32_t n_layer_dense_lead = 0;     // leading_dense_block_count
  float expert_weights_scale = 0;      // applied unless 0 or 1
  bool expert_weights_norm = false;
  Gating gating = Gating::Sigmoid;
  uint32_t n_embd_latent = 0;          // d_lat, expert_latent_length (0: experts at H)
  uint32_t n_expert_groups = 0;        // expert_group_count (grouping unsupported if > 1)
  uint32_t n_group_used = 0;

  // AttnRes, situ
  uint32_t attn_res_block = 0;         // B, attn_res.block_size (0: AttnRes off)
  float situ_beta = 0, situ_linear_beta = 0;

  // ---- tensor-presence features (not keys: found from the file, chosen by make-tiny) ----
  bool has_attn_gate = true;           // blk.i.attn_gate (MLA output gate)
  bool has_routed_norm = true;         // blk.i.ffn_routed_norm (only with a latent)
  bool has_shexp = true;               // blk.i.ffn_*_shexp (needs n_expert_shared > 0)

  // ---- derived ----
  AttnKind attn_kind(uint32_t il) const { return n_head_kv[il] == 0 ? AttnKind::KDA : AttnKind::MLA; }
  FfnKind ffn_kind(uint32_t il) const { return il < n_layer_dense_lead ? FfnKind::Dense : FfnKind::MoE; }
  bool attn_res() const { return attn_res_block > 0; }
  bool banks(uint32_t il) const { return attn_res_block > 0 && il % attn_res_block == 0; }
  bool q_lora() const { return q_lora_rank > 0; }
  bool latent() const { return n_embd_latent > 0; }
  uint32_t d_lat() const { return n_embd_latent > 0 ? n_embd_latent : n_embd; }
  uint32_t d_inner(uint32_t il) const { return n_head[il] * kda_head_dim; }     // D
  uint32_t d_nope() const { return n_embd_head_k_mla - n_rot; }
  uint32_t mla_row() const { return kv_lora_rank + n_rot; }                      // cache row width
  uint32_t n_ff_shexp(uint32_t il) const { return n_ff_exp[il] * n_expert_shared; }
  uint32_t count(AttnKind k) const;

  // Reads and validates; errors (k3::Error) name the key. n_vocab is taken from the tokenizer
  // token list if present, else from kimi-k3.vocab_size.
  static HParams from_metadata(const gguf::Metadata& meta);
  // Writes every kimi-k3.* key this struct holds (and general.architecture), with the exact
  // types of gguf-contract.md §3.
  void to_metadata(gguf::Metadata& meta) const;
  // Consistency rules (gguf-contract.md §3.2 and what the K3 graph needs); throws naming the rule.
  void validate() const;
  std::string summary() const;
};

// Layer schedule of the real model, generalised: MLA on every 4th layer counted 1-based, plus the
// last layer; returns head_count_kv values (0 = KDA, 1 = MLA).
std::vector<uint32_t> k3_layer_schedule(uint32_t n_layer, uint32_t mla_every = 4);

}  // namespace k3::model
