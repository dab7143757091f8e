#include "spec/draft_file.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "model/model.h"

namespace k3::spec {

using gguf::Metadata;
using gguf::Value;

static std::string key(const char* k) { return std::string(kDraftArch) + "." + k; }

DraftParams DraftParams::from_metadata(const Metadata& m) {
  const std::string arch = m.get_str("general.architecture");
  if (arch != kDraftArch) fail("general.architecture is '%s', expected '%s' (a DSpark draft)", arch.c_str(), kDraftArch);
  DraftParams p;
  p.n_layer = m.get_u32(key("block_count"));
  p.n_embd = m.get_u32(key("embedding_length"));
  p.n_ff = m.get_u32(key("feed_forward_length"));
  p.n_ctx = m.get_u32(key("context_length"));
  p.n_vocab = m.get_u32(key("vocab_size"));
  const uint32_t dv = m.get_u32(key("draft_vocab_size"));
  if (dv != p.n_vocab)
    fail("%s = %u differs from %s = %u (a reduced draft vocabulary is not supported)", key("draft_vocab_size").c_str(),
         dv, key("vocab_size").c_str(), p.n_vocab);
  p.n_head = m.get_u32(key("attention.head_count"));
  if (const uint32_t kv = m.get_u32(key("attention.head_count_kv")); kv != 1)
    fail("%s = %u: the draft has one latent KV head", key("attention.head_count_kv").c_str(), kv);
  p.eps = m.get_f32(key("attention.layer_norm_rms_epsilon"));
  p.q_lora = m.get_u32(key("attention.q_lora_rank"));
  p.kv_lora = m.get_u32(key("attention.kv_lora_rank"));
  p.d_rope = m.get_u32(key("rope.dimension_count"));
  const uint32_t dqk = m.get_u32(key("attention.key_length_mla"));
  p.d_v = m.get_u32(key("attention.value_length_mla"));
  if (dqk <= p.d_rope) fail("%s = %u must exceed rope.dimension_count %u", key("attention.key_length_mla").c_str(), dqk, p.d_rope);
  p.d_nope = dqk - p.d_rope;
  if (const uint32_t kl = m.get_u32(key("attention.key_length")); kl != p.row())
    fail("%s = %u but kv_lora_rank + rope.dimension_count = %u", key("attention.key_length").c_str(), kl, p.row());
  if (const uint32_t vl = m.get_u32(key("attention.value_length")); vl != p.kv_lora)
    fail("%s = %u but kv_lora_rank = %u", key("attention.value_length").c_str(), vl, p.kv_lora);
  if (m.get_bool(key("attention.causal"))) fail("%s = true: the DSpark block is non-causal", key("attention.causal").c_str());
  if (p.d_rope == 0 || p.d_rope % 2) fail("%s = %u must be even and positive", key("rope.dimension_count").c_str(), p.d_rope);
  p.rope_base = m.get_f32(key("rope.freq_base"));
  const std::string scaling = m.get_str(key("rope.scaling.type"));
  if (scaling == "yarn") {
    p.yarn = true;
    p.yarn_factor = m.get_f32(key("rope.scaling.factor"));
    p.yarn_orig_ctx = m.get_u32(key("rope.scaling.original_context_length"));
    p.yarn_beta_fast = m.get_f32(key("rope.scaling.yarn_beta_fast"));
    p.yarn_beta_slow = m.get_f32(key("rope.scaling.yarn_beta_slow"));
    p.yarn_mscale = m.get_f32(key("rope.scaling.yarn_mscale"));
    p.yarn_mscale_all_dim = m.get_f32(key("rope.scaling.yarn_mscale_all_dim"));
    if (!(p.yarn_factor > 0) || p.yarn_orig_ctx == 0)
      fail("%s: rope.scaling.factor must be positive and original_context_length non-zero", key("rope.scaling").c_str());
  } else if (scaling != "none") {
    fail("%s = '%s': expected 'yarn' or 'none'", key("rope.scaling.type").c_str(), scaling.c_str());
  }
  const gguf::Array& ids = m.get_array(key("target_layer_ids"));
  if (const auto* v = std::get_if<std::vector<int32_t>>(&ids.data)) {
    for (int32_t x : *v) {
      if (x < 0) fail("%s holds %d: layer ids are >= 0", key("target_layer_ids").c_str(), x);
      p.taps.push_back(static_cast<uint32_t>(x));
    }
  } else if (const auto* u = std::get_if<std::vector<uint32_t>>(&ids.data)) {
    p.taps = *u;
  } else {
    fail("%s is an array of %s, expected INT32 or UINT32", key("target_layer_ids").c_str(), gguf::value_type_name(ids.elem));
  }
  p.target_embd = m.get_u32(key("target_embedding_length"));
  p.target_layers = m.get_u32(key("target_block_count"));
  p.mask_id = m.get_u32(key("mask_token_id"));
  p.markov_rank = m.get_u32(key("markov_rank"));
  if (const std::string& t = m.get_str(key("markov_head_type")); t != "vanilla")
    fail("%s = '%s': only 'vanilla' is supported", key("markov_head_type").c_str(), t.c_str());
  p.block_size = m.get_u32(key("block_size"));
  if (const auto act = m.get_str_opt(key("ffn_activation")); act && *act != "silu")
    fail("%s = '%s': only 'silu' is supported", key("ffn_activation").c_str(), act->c_str());
  if (p.n_layer == 0 || p.n_embd == 0 || p.n_ff == 0 || p.n_head == 0 || p.q_lora == 0 || p.kv_lora == 0 ||
      p.d_v == 0 || p.n_vocab == 0 || p.markov_rank == 0 || p.block_size == 0)
    fail("%s: block_count, widths, head count, ranks, vocabulary and block_size must be non-zero", kDraftArch);
  return p;
}

void DraftParams::to_metadata(Metadata& m) const {
  m.set("general.architecture", Value::str(kDraftArch));
  m.set(key("block_count"), Value::u32(n_layer));
  m.set(key("embedding_length"), Value::u32(n_embd));
  m.set(key("feed_forward_length"), Value::u32(n_ff));
  m.set(key("context_length"), Value::u32(n_ctx));
  m.set(key("vocab_size"), Value::u32(n_vocab));
  m.set(key("draft_vocab_size"), Value::u32(n_vocab));
  m.set(key("attention.head_count"), Value::u32(n_head));
  m.set(key("attention.head_count_kv"), Value::u32(1));
  m.set(key("attention.layer_norm_rms_epsilon"), Value::f32(eps));
  m.set(key("attention.q_lora_rank"), Value::u32(q_lora));
  m.set(key("attention.kv_lora_rank"), Value::u32(kv_lora));
  m.set(key("attention.key_length"), Value::u32(row()));
  m.set(key("attention.value_length"), Value::u32(kv_lora));
  m.set(key("attention.key_length_mla"), Value::u32(d_qk()));
  m.set(key("attention.value_length_mla"), Value::u32(d_v));
  m.set(key("attention.causal"), Value::boolean(false));
  m.set(key("rope.dimension_count"), Value::u32(d_rope));
  m.set(key("rope.freq_base"), Value::f32(rope_base));
  m.set(key("rope.scaling.type"), Value::str(yarn ? "yarn" : "none"));
  if (yarn) {
    m.set(key("rope.scaling.factor"), Value::f32(yarn_factor));
    m.set(key("rope.scaling.original_context_length"), Value::u32(yarn_orig_ctx));
    m.set(key("rope.scaling.yarn_beta_fast"), Value::f32(yarn_beta_fast));
    m.set(key("rope.scaling.yarn_beta_slow"), Value::f32(yarn_beta_slow));
    m.set(key("rope.scaling.yarn_mscale"), Value::f32(yarn_mscale));
    m.set(key("rope.scaling.yarn_mscale_all_dim"), Value::f32(yarn_mscale_all_dim));
  }
  gguf::Array ids;
  ids.elem = gguf::ValueType::INT32;
  ids.data = std::vector<int32_t>(taps.begin(), taps.end());
  m.set(key("target_layer_ids"), Value::array(std::move(ids)));
  m.set(key("target_embedding_length"), Value::u32(target_embd));
  m.set(key("target_block_count"), Value::u32(target_layers));
  m.set(key("mask_token_id"), Value::u32(mask_id));
  m.set(key("markov_rank"), Value::u32(markov_rank));
  m.set(key("markov_head_type"), Value::str("vanilla"));
  m.set(key("block_size"), Value::u32(block_size));
  m.set(key("ffn_activation"), Value::str("silu"));
}

std::vector<DraftTensor> draft_tensors(const DraftParams& p) {
  const int64_t H = p.n_embd, V = p.n_vocab, nh = p.n_head;
  using R = DraftRule;
  using S = DraftSource;
  using W = DraftWeights;
  using L = DraftLayerWeights;
  auto global = [](const char* name, const char* hf, std::vector<int64_t> ne, R r, S s, model::Tensor W::*f) {
    return DraftTensor{name, hf, std::move(ne), r, s, f == &W::token_embd, f, nullptr, 0};
  };
  std::vector<DraftTensor> t = {
      global("token_embd.weight", "embed_tokens.weight", {H, V}, R::Matrix, S::Copy, &W::token_embd),
      global("output_norm.weight", "final_norm.weight", {H}, R::F32, S::Gain, &W::output_norm),
      global("dspark_context_proj.weight", "context_proj.weight", {static_cast<int64_t>(p.taps.size()) * H, H},
             R::Matrix, S::Copy, &W::context_proj),
      global("dspark_context_norm.weight", "context_norm.weight", {H}, R::F32, S::Gain, &W::context_norm),
      global("markov_w1.weight", "markov_head.markov_w1.weight", {p.markov_rank, V}, R::Matrix, S::Copy, &W::markov_w1),
      global("markov_w2.weight", "markov_head.markov_w2.weight", {p.markov_rank, V}, R::Matrix, S::Copy, &W::markov_w2),
  };
  for (uint32_t l = 0; l < p.n_layer; ++l) {
    auto add = [&](const char* name, const char* hf, std::vector<int64_t> ne, R r, S s, model::Tensor L::*f) {
      t.push_back({strprintf("blk.%u.%s.weight", l, name), strprintf("layers.%u.%s.weight", l, hf), std::move(ne), r, s,
                   false, nullptr, f, l});
    };
    add("attn_norm", "input_layernorm", {H}, R::F32, S::Gain, &L::attn_norm);
    add("attn_q_a", "self_attn.q_a_proj", {H, p.q_lora}, R::Matrix, S::Copy, &L::q_a);
    add("attn_q_a_norm", "self_attn.q_a_layernorm", {p.q_lora}, R::F32, S::Gain, &L::q_a_norm);
    add("attn_q_b", "self_attn.q_b_proj", {p.q_lora, nh * p.d_qk()}, R::Matrix, S::Copy, &L::q_b);
    add("attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa", {H, p.row()}, R::Matrix, S::Copy, &L::kv_a);
    add("attn_kv_a_norm", "self_attn.kv_a_layernorm", {p.kv_lora}, R::F32, S::Gain, &L::kv_a_norm);
    add("attn_k_b", "self_attn.kv_b_proj", {p.d_nope, p.kv_lora, nh}, R::PerHead, S::SplitKb, &L::k_b);
    add("attn_v_b", "self_attn.kv_b_proj", {p.kv_lora, p.d_v, nh}, R::PerHead, S::SplitVb, &L::v_b);
    add("attn_output", "self_attn.o_proj", {nh * p.d_v, H}, R::Matrix, S::Copy, &L::wo);
    add("ffn_norm", "post_attention_layernorm", {H}, R::F32, S::Gain, &L::ffn_norm);
    add("ffn_gate", "mlp.gate_proj", {H, p.n_ff}, R::Matrix, S::Copy, &L::ffn_gate);
    add("ffn_up", "mlp.up_proj", {H, p.n_ff}, R::Matrix, S::Copy, &L::ffn_up);
    add("ffn_down", "mlp.down_proj", {p.n_ff, H}, R::Matrix, S::Copy, &L::ffn_down);
  }
  return t;
}

bool draft_type_allowed(DraftRule r, GgmlType t, int64_t ne0, std::string* why) {
  const TypeInfo& ti = type_info(t);
  auto no = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  if (r == DraftRule::F32 && t != GgmlType::F32) return no(strprintf("has type %s, must be f32 (a gain)", ti.name));
  if (r == DraftRule::PerHead && t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16 && t != GgmlType::Q8_0)
    return no(strprintf("has type %s, must be f32, f16, bf16 or q8_0", ti.name));
  if (!ti.computable || t == GgmlType::Q8_1 || t == GgmlType::Q8_K)
    return no(strprintf("has type %s, which k3 cannot compute", ti.name));
  if (ne0 % ti.block != 0)
    return no(strprintf("has type %s but its row length %lld is not a multiple of the block size %lld", ti.name,
                        static_cast<long long>(ne0), static_cast<long long>(ti.block)));
  return true;
}

DraftWeights bind_draft(const gguf::Model& file, const DraftParams& p) {
  const std::string& path = file.files().front()->path();
  DraftWeights w;
  w.layers.resize(p.n_layer);
  std::set<std::string, std::less<>> consumed;
  for (const DraftTensor& d : draft_tensors(p)) {
    model::Tensor* dst = d.global ? &(w.*d.global) : &(w.layers[d.il].*d.layer);
    const gguf::TensorInfo* ti = file.find(d.name);
    if (!ti) {
      if (d.optional) continue;
      fail("%s: missing tensor '%s'", path.c_str(), d.name.c_str());
    }
    const std::vector<int64_t> got(ti->ne, ti->ne + ti->n_dims);
    if (got != d.ne) {
      auto str = [](const std::vector<int64_t>& v) {
        std::string s = "[";
        for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
        return s + "]";
      };
      fail("%s: tensor '%s' has shape %s, expected %s", path.c_str(), d.name.c_str(), str(got).c_str(), str(d.ne).c_str());
    }
    std::string why;
    if (!draft_type_allowed(d.rule, ti->type, ti->ne[0], &why)) fail("%s: tensor '%s' %s", path.c_str(), d.name.c_str(), why.c_str());
    consumed.insert(d.name);
    dst->info = ti;
    dst->type = ti->type;
    dst->data = ti->data;
    for (int k = 0; k < 4; ++k) dst->ne[k] = ti->ne[k];
  }
  for (const gguf::TensorInfo* ti : file.tensors())
    if (!consumed.count(ti->name))
      fail("%s: unexpected tensor '%s' (not part of a %s draft with these parameters)", path.c_str(),
           ti->name.substr(0, 80).c_str(), kDraftArch);
  return w;
}

void check_fit(const DraftParams& p, const DraftWeights& w, const model::Model& target, uint32_t block,
               const std::string& draft_path) {
  const model::HParams& hp = target.hparams();
  const std::string who = draft_path + " does not fit " + target.file().files().front()->path() + ": ";
  auto refuse = [&](const std::string& why) { fail("%s%s", who.c_str(), why.c_str()); };
  if (p.n_embd != hp.n_embd || p.target_embd != hp.n_embd)
    refuse(strprintf("hidden size: the draft's embedding_length is %u and its target_embedding_length %u, the "
                     "target's embedding_length is %u",
                     p.n_embd, p.target_embd, hp.n_embd));
  const int64_t out_rows = target.weights().output.info ? target.weights().output.info->ne[1] : 0;
  const int64_t emb_rows = target.weights().token_embd.info ? target.weights().token_embd.info->ne[1] : 0;
  if (p.n_vocab != hp.n_vocab || out_rows != p.n_vocab || emb_rows != p.n_vocab)
    refuse(strprintf("vocabulary: the draft has %u tokens, the target %u (output.weight %lld rows, token_embd %lld)",
                     p.n_vocab, hp.n_vocab, static_cast<long long>(out_rows), static_cast<long long>(emb_rows)));
  if (p.target_layers != hp.n_layer)
    refuse(strprintf("layers: the draft was made for a target of %u layers (target_block_count), the target has %u",
                     p.target_layers, hp.n_layer));
  if (p.taps.empty()) refuse("tap layers: target_layer_ids is empty");
  std::set<uint32_t> seen;
  for (uint32_t l : p.taps) {
    if (l >= hp.n_layer)
      refuse(strprintf("tap layers: target_layer_ids holds layer %u, the target has layers 0..%u", l, hp.n_layer - 1));
    if (!seen.insert(l).second) refuse(strprintf("tap layers: target_layer_ids names layer %u twice", l));
  }
  if (p.mask_id >= p.n_vocab) refuse(strprintf("mask_token_id %u is outside the vocabulary of %u", p.mask_id, p.n_vocab));
  if (w.token_embd) {
    const model::Tensor& te = target.weights().token_embd;
    if (w.token_embd.ne[0] != te.ne[0] || w.token_embd.ne[1] != emb_rows)
      refuse("the draft's token_embd does not have the target's shape");
  }
  if (block > p.block_size)
    refuse(strprintf("--draft-max %u exceeds the draft's block_size %u", block, p.block_size));
}

}  // namespace k3::spec
