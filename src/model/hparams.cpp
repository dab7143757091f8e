#include "model/hparams.h"

#include <algorithm>

#include "common/error.h"

namespace k3::model {

using gguf::Metadata;
using gguf::Value;

static std::string key(const char* k) { return std::string(kArch) + "." + k; }

uint32_t HParams::count(AttnKind k) const {
  uint32_t n = 0;
  for (uint32_t il = 0; il < n_layer; ++il) n += attn_kind(il) == k;
  return n;
}

std::vector<uint32_t> k3_layer_schedule(uint32_t n_layer, uint32_t mla_every) {
  std::vector<uint32_t> kv(n_layer, 0);
  for (uint32_t il = 0; il < n_layer; ++il)
    if ((mla_every > 0 && (il + 1) % mla_every == 0) || il + 1 == n_layer) kv[il] = 1;
  return kv;
}

HParams HParams::from_metadata(const Metadata& m) {
  const std::string arch = m.get_str("general.architecture");
  if (arch != kArch) fail("general.architecture is '%s', expected '%s'", arch.c_str(), kArch);

  HParams hp;
  hp.n_ctx_train = m.get_u32(key("context_length"));
  hp.n_embd = m.get_u32(key("embedding_length"));
  hp.n_layer = m.get_u32(key("block_count"));
  if (hp.n_layer == 0 || hp.n_layer > 512) fail("%s = %u: must be in 1..512", key("block_count").c_str(), hp.n_layer);
  const uint32_t L = hp.n_layer;

  if (const Value* t = m.find("tokenizer.ggml.tokens")) {
    if (t->type != gguf::ValueType::ARRAY) fail("tokenizer.ggml.tokens is not an array");
    hp.n_vocab = static_cast<uint32_t>(std::get<gguf::Array>(t->v).size());
  } else {
    hp.n_vocab = m.get_u32(key("vocab_size"));
  }

  hp.n_head = m.get_u32_per_layer(key("attention.head_count"), L);
  // head_count_kv: the layer-type marker; a scalar is accepted but makes every layer the same type.
  hp.n_head_kv = m.has(key("attention.head_count_kv")) ? m.get_u32_per_layer(key("attention.head_count_kv"), L)
                                                       : std::vector<uint32_t>(L, 0);
  hp.n_ff = m.has(key("feed_forward_length")) ? m.get_u32_per_layer(key("feed_forward_length"), L)
                                              : std::vector<uint32_t>(L, 0);
  hp.rms_eps = m.get_f32(key("attention.layer_norm_rms_epsilon"));

  const bool any_mla = std::any_of(hp.n_head_kv.begin(), hp.n_head_kv.end(), [](uint32_t v) { return v > 0; });
  const bool any_kda = std::any_of(hp.n_head_kv.begin(), hp.n_head_kv.end(), [](uint32_t v) { return v == 0; });
  if (any_mla) {
    hp.n_embd_head_k_mla = m.get_u32(key("attention.key_length_mla"));
    hp.n_embd_head_v_mla = m.get_u32(key("attention.value_length_mla"));
    hp.kv_lora_rank = m.get_u32(key("attention.kv_lora_rank"));
    hp.q_lora_rank = m.get_u32_or(key("attention.q_lora_rank"), 0);
    hp.n_rot = m.has(key("rope.dimension_count")) ? m.get_u32(key("rope.dimension_count"))
                                                  : m.get_u32(key("attention.key_length")) - hp.kv_lora_rank;
    if (m.has(key("attention.key_length"))) {
      const uint32_t kl = m.get_u32(key("attention.key_length"));
      if (kl != hp.kv_lora_rank + hp.n_rot)
        fail("%s = %u but kv_lora_rank + rope.dimension_count = %u", key("attention.key_length").c_str(), kl,
             hp.kv_lora_rank + hp.n_rot);
    }
    if (m.has(key("attention.value_length"))) (void)m.get_u32(key("attention.value_length"));  // type check only
  }
  if (any_kda) {
    hp.ssm_d_conv = m.get_u32(key("ssm.conv_kernel"));
    hp.kda_head_dim = m.get_u32(key("kda.head_dim"));
    if (m.has(key("kda.gate_lower_bound"))) hp.kda_gate_lb = m.get_f32(key("kda.gate_lower_bound"));
  }

  hp.n_layer_dense_lead = m.get_u32_or(key("leading_dense_block_count"), 0);
  hp.n_expert = m.get_u32_or(key("expert_count"), 0);
  const bool any_moe = hp.n_layer_dense_lead < L;
  if (any_moe) {
    hp.n_expert_used = m.get_u32_per_layer(key("expert_used_count"), L);
    hp.n_ff_exp = m.get_u32_per_layer(key("expert_feed_forward_length"), L);
    hp.n_expert_shared = m.get_u32(key("expert_shared_count"));
    hp.gating = static_cast<Gating>(m.get_u32(key("expert_gating_func")));
  } else {
    hp.n_expert_used.assign(L, 0);
    hp.n_ff_exp.assign(L, 0);
  }
  hp.expert_weights_scale = m.get_f32_or(key("expert_weights_scale"), 0.0f);
  hp.expert_weights_norm = m.get_bool_or(key("expert_weights_norm"), false);
  hp.n_embd_latent = m.get_u32_or(key("expert_latent_length"), 0);
  hp.n_expert_groups = m.get_u32_or(key("expert_group_count"), 0);
  hp.n_group_used = m.get_u32_or(key("expert_group_used_count"), 0);

  hp.attn_res_block = m.get_u32(key("attn_res.block_size"));
  hp.situ_beta = m.get_f32(key("activation.situ_beta"));
  hp.situ_linear_beta = m.get_f32(key("activation.situ_linear_beta"));
  if (m.has(key("attention.causal")) && !m.get_bool(key("attention.causal")))
    fail("%s = false is not supported", key("attention.causal").c_str());
  hp.has_shexp = hp.n_expert_shared > 0;
  hp.has_routed_norm = hp.latent();
  hp.validate();
  return hp;
}

static bool uniform(const std::vector<uint32_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](uint32_t x) { return x == v.front(); });
}

static Value per_layer(const std::vector<uint32_t>& v, bool force_array) {
  if (!force_array && uniform(v)) return Value::u32(v.front());
  gguf::Array a;
  a.elem = gguf::ValueType::INT32;
  a.data = std::vector<int32_t>(v.begin(), v.end());
  return Value::array(std::move(a));
}

void HParams::to_metadata(Metadata& m) const {
  validate();
  m.set("general.architecture", Value::str(kArch));
  m.set(key("context_length"), Value::u32(n_ctx_train));
  m.set(key("embedding_length"), Value::u32(n_embd));
  m.set(key("block_count"), Value::u32(n_layer));
  m.set(key("vocab_size"), Value::u32(n_vocab));
  m.set(key("feed_forward_length"), per_layer(n_ff, false));
  m.set(key("attention.head_count"), per_layer(n_head, false));
  m.set(key("attention.head_count_kv"), per_layer(n_head_kv, true));
  m.set(key("attention.layer_norm_rms_epsilon"), Value::f32(rms_eps));
  m.set(key("attention.key_length"), Value::u32(kv_lora_rank + n_rot));
  m.set(key("attention.value_length"), Value::u32(kv_lora_rank));
  m.set(key("attention.key_length_mla"), Value::u32(n_embd_head_k_mla));
  m.set(key("attention.value_length_mla"), Value::u32(n_embd_head_v_mla));
  if (q_lora_rank > 0) m.set(key("attention.q_lora_rank"), Value::u32(q_lora_rank));
  m.set(key("attention.kv_lora_rank"), Value::u32(kv_lora_rank));
  m.set(key("rope.dimension_count"), Value::u32(n_rot));
  m.set(key("ssm.conv_kernel"), Value::u32(ssm_d_conv));
  m.set(key("kda.head_dim"), Value::u32(kda_head_dim));
  if (kda_gate_lb) m.set(key("kda.gate_lower_bound"), Value::f32(*kda_gate_lb));
  m.set(key("expert_count"), Value::u32(n_expert));
  m.set(key("expert_used_count"), per_layer(n_expert_used, false));
  m.set(key("expert_feed_forward_length"), per_layer(n_ff_exp, false));
  m.set(key("expert_shared_count"), Value::u32(n_expert_shared));
  m.set(key("leading_dense_block_count"), Value::u32(n_layer_dense_lead));
  m.set(key("expert_weights_scale"), Value::f32(expert_weights_scale));
  m.set(key("expert_weights_norm"), Value::boolean(expert_weights_norm));
  m.set(key("expert_gating_func"), Value::u32(static_cast<uint32_t>(gating)));
  if (n_embd_latent > 0) m.set(key("expert_latent_length"), Value::u32(n_embd_latent));
  if (n_expert_groups > 0) m.set(key("expert_group_count"), Value::u32(n_expert_groups));
  m.set(key("expert_group_used_count"), Value::u32(n_group_used > 0 ? n_group_used : 1));
  m.set(key("attn_res.block_size"), Value::u32(attn_res_block));
  m.set(key("activation.situ_beta"), Value::f32(situ_beta));
  m.set(key("activation.situ_linear_beta"), Value::f32(situ_linear_beta));
}

void HParams::validate() const {
  const uint32_t L = n_layer;
  if (L == 0 || L > 512) fail("block_count = %u: must be in 1..512", L);
  if (n_embd == 0) fail("embedding_length is 0");
  if (n_vocab == 0) fail("vocabulary is empty");
  if (n_ctx_train == 0) fail("context_length is 0");
  if (!(rms_eps > 0.0f)) fail("attention.layer_norm_rms_epsilon = %g: must be > 0", rms_eps);
  for (const auto* v : {&n_head, &n_head_kv, &n_ff, &n_expert_used, &n_ff_exp})
    if (v->size() != L) fail("per-layer hyperparameter has %zu entries, block_count is %u", v->size(), L);
  if (n_layer_dense_lead > L) fail("leading_dense_block_count = %u exceeds block_count = %u", n_layer_dense_lead, L);

  bool any_moe = false;
  for (uint32_t il = 0; il < L; ++il) {
    if (n_head[il] == 0) fail("attention.head_count[%u] is 0", il);
    if (attn_kind(il) == AttnKind::MLA) {
      if (kv_lora_rank == 0) fail("layer %u is MLA (head_count_kv > 0) but attention.kv_lora_rank is 0", il);
      if (n_embd_head_k_mla <= n_rot)
        fail("attention.key_length_mla = %u must exceed rope.dimension_count = %u", n_embd_head_k_mla, n_rot);
      if (n_embd_head_v_mla == 0) fail("attention.value_length_mla is 0");
    } else {
      if (kda_head_dim == 0) fail("layer %u is KDA (head_count_kv = 0) but kda.head_dim is 0", il);
      if (ssm_d_conv == 0 || ssm_d_conv > 16) fail("ssm.conv_kernel = %u: must be in 1..16", ssm_d_conv);
    }
    if (ffn_kind(il) == FfnKind::Dense) {
      if (n_ff[il] == 0) fail("layer %u is dense but feed_forward_length[%u] is 0", il, il);
    } else {
      any_moe = true;
      if (n_expert_used[il] == 0) fail("expert_used_count[%u] is 0", il);
      if (n_expert_used[il] > n_expert)
        fail("expert_used_count[%u] = %u exceeds expert_count = %u", il, n_expert_used[il], n_expert);
      if (n_ff_exp[il] == 0) fail("expert_feed_forward_length[%u] is 0", il);
    }
  }
  if (any_moe) {
    if (n_expert == 0) fail("MoE layers need expert_count > 0");
    if (n_expert > 1024) fail("expert_count = %u exceeds 1024", n_expert);
    if (n_expert_groups > 1) fail("expert_group_count = %u: expert groups are not supported", n_expert_groups);
    if (gating != Gating::Sigmoid && gating != Gating::Softmax)
      fail("expert_gating_func = %u is not supported (1 softmax, 2 sigmoid)", static_cast<uint32_t>(gating));
  }
  if (has_shexp && n_expert_shared == 0) fail("shared-expert tensors need expert_shared_count > 0");
  if (has_routed_norm && !latent()) fail("ffn_routed_norm needs expert_latent_length > 0");
}

std::string HParams::summary() const {
  return strprintf("n_layer=%u (%u KDA, %u MLA) n_embd=%u n_vocab=%u n_head=%u kda_head_dim=%u r_q=%u r_kv=%u "
                   "d_qk=%u d_v=%u n_expert=%u top_k=%u d_lat=%u f_e=%u shared=%u dense_lead=%u attn_res_block=%u "
                   "eps=%g",
                   n_layer, count(AttnKind::KDA), count(AttnKind::MLA), n_embd, n_vocab, n_head[0], kda_head_dim,
                   q_lora_rank, kv_lora_rank, n_embd_head_k_mla, n_embd_head_v_mla, n_expert,
                   n_expert_used.empty() ? 0 : n_expert_used.back(), d_lat(),
                   n_ff_exp.empty() ? 0 : n_ff_exp.back(), n_expert_shared, n_layer_dense_lead, attn_res_block,
                   rms_eps);
}

}  // namespace k3::model
