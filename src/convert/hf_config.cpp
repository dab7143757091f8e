#include "convert/hf_config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace k3::convert {

using json = nlohmann::json;

namespace {
class Fields {
 public:
  Fields(const json& merged, std::string path) : j_(merged), path_(std::move(path)) {}

  const json* find(const std::string& dotted) const {
    const json* cur = &j_;
    size_t pos = 0;
    while (true) {
      size_t dot = dotted.find('.', pos);
      std::string part = dotted.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      if (!cur->is_object()) return nullptr;
      auto it = cur->find(part);
      if (it == cur->end() || it->is_null()) return nullptr;
      cur = &*it;
      if (dot == std::string::npos) return cur;
      pos = dot + 1;
    }
  }
  const json& need(const std::string& k) const {
    const json* v = find(k);
    if (!v) fail("%s: missing field '%s' (looked in text_config and at the top level)", path_.c_str(), k.c_str());
    return *v;
  }
  uint32_t u32(const std::string& k) const { return to_u32(need(k), k); }
  uint32_t u32_or(const std::string& k, uint32_t d) const {
    const json* v = find(k);
    return v ? to_u32(*v, k) : d;
  }
  float f32(const std::string& k) const { return to_f32(need(k), k); }
  std::optional<float> f32_opt(const std::string& k) const {
    const json* v = find(k);
    return v ? std::optional<float>(to_f32(*v, k)) : std::nullopt;
  }
  bool boolean_or(const std::string& k, bool d) const {
    const json* v = find(k);
    if (!v) return d;
    if (!v->is_boolean()) fail("%s: field '%s' must be true or false", path_.c_str(), k.c_str());
    return v->get<bool>();
  }
  std::string str_or(const std::string& k, const std::string& d) const {
    const json* v = find(k);
    if (!v) return d;
    if (!v->is_string()) fail("%s: field '%s' must be a string", path_.c_str(), k.c_str());
    return v->get<std::string>();
  }
  const std::string& path() const { return path_; }

 private:
  uint32_t to_u32(const json& v, const std::string& k) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > UINT32_MAX)
      fail("%s: field '%s' must be a non-negative integer", path_.c_str(), k.c_str());
    return static_cast<uint32_t>(v.get<int64_t>());
  }
  float to_f32(const json& v, const std::string& k) const {
    if (!v.is_number()) fail("%s: field '%s' must be a number", path_.c_str(), k.c_str());
    return static_cast<float>(v.get<double>());
  }
  const json& j_;
  std::string path_;
};
}  // namespace

HfConfig read_hf_config(const std::string& path) {
  json top;
  {
    std::ifstream in(path);
    if (!in) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
    try {
      top = json::parse(in);
    } catch (const json::exception& e) {
      fail("%s: not valid JSON: %s", path.c_str(), e.what());
    }
  }
  if (!top.is_object()) fail("%s: not a JSON object", path.c_str());
  json merged = top;
  if (top.contains("text_config")) {
    if (!top["text_config"].is_object()) fail("%s: 'text_config' is not an object", path.c_str());
    for (auto it = top["text_config"].begin(); it != top["text_config"].end(); ++it) merged[it.key()] = it.value();
  }
  Fields f(merged, path);
  HfConfig c;
  c.path = path;
  model::HParams& hp = c.hp;
  hp.n_layer = f.u32("num_hidden_layers");
  const uint32_t L = hp.n_layer;
  if (L == 0 || L > 512) fail("%s: num_hidden_layers = %u: must be in 1..512", path.c_str(), L);
  hp.n_ctx_train = f.u32("max_position_embeddings");
  hp.n_embd = f.u32("hidden_size");
  hp.n_vocab = f.u32("vocab_size");
  hp.n_head.assign(L, f.u32("num_attention_heads"));
  c.n_kv_heads = f.u32("num_key_value_heads");
  hp.rms_eps = f.f32("rms_norm_eps");
  hp.n_ff.assign(L, f.u32("intermediate_size"));

  const std::string act = f.str_or("hidden_act", "situ");
  if (act != "situ") fail("%s: hidden_act is '%s'; Kimi-K3 uses 'situ'", path.c_str(), act.c_str());
  hp.situ_beta = f.f32("activation_situ_beta");
  hp.situ_linear_beta = f.f32("activation_situ_linear_beta");
  hp.attn_res_block = f.u32("attn_res_block_size");

  // Layer schedule: full_attn_layers is 1-based.
  const json& fal = f.need("linear_attn_config.full_attn_layers");
  if (!fal.is_array()) fail("%s: field 'linear_attn_config.full_attn_layers' must be a list", path.c_str());
  hp.n_head_kv.assign(L, 0);
  for (const json& x : fal) {
    if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > L)
      fail("%s: 'linear_attn_config.full_attn_layers' holds %s, not a layer number in 1..%u", path.c_str(),
           x.dump().c_str(), L);
    hp.n_head_kv[x.get<int64_t>() - 1] = 1;
  }
  const bool any_kda = std::count(hp.n_head_kv.begin(), hp.n_head_kv.end(), 0u) > 0;
  const bool any_mla = std::count(hp.n_head_kv.begin(), hp.n_head_kv.end(), 1u) > 0;
  if (any_kda) {
    hp.ssm_d_conv = f.u32("linear_attn_config.short_conv_kernel_size");
    hp.kda_head_dim = f.u32("linear_attn_config.head_dim");
    hp.kda_gate_lb = f.f32_opt("linear_attn_config.gate_lower_bound");
  }
  if (any_mla) {
    if (!f.boolean_or("mla_use_nope", true))
      fail("%s: mla_use_nope is false; Kimi-K3 MLA has no rotary embedding", path.c_str());
    hp.kv_lora_rank = f.u32("kv_lora_rank");
    hp.q_lora_rank = f.u32_or("q_lora_rank", 0);
    const uint32_t nope = f.u32("qk_nope_head_dim"), rope = f.u32("qk_rope_head_dim");
    hp.n_embd_head_k_mla = nope + rope;
    hp.n_rot = rope;
    hp.n_embd_head_v_mla = f.u32("v_head_dim");
  }

  hp.n_layer_dense_lead = std::min(f.u32_or("first_k_dense_replace", 0), L);
  if (hp.n_layer_dense_lead < L) {
    hp.n_expert = f.u32("num_experts");
    hp.n_expert_used.assign(L, f.u32("num_experts_per_token"));
    hp.n_ff_exp.assign(L, f.u32("moe_intermediate_size"));
    hp.n_expert_shared = f.u32_or("num_shared_experts", 0);
    hp.expert_weights_scale = f.f32_opt("routed_scaling_factor").value_or(1.0f);
    hp.expert_weights_norm = f.boolean_or("moe_renormalize", false);
    hp.n_group_used = f.u32_or("topk_group", 0);
    hp.n_embd_latent = f.u32_or("routed_expert_hidden_size", 0);
    const std::string gate = f.str_or("moe_router_activation_func", "sigmoid");
    if (gate == "sigmoid")
      hp.gating = model::Gating::Sigmoid;
    else if (gate == "softmax")
      hp.gating = model::Gating::Softmax;
    else
      fail("%s: moe_router_activation_func is '%s'; expected 'sigmoid' (or 'softmax')", path.c_str(), gate.c_str());
  } else {
    hp.n_expert_used.assign(L, 0);
    hp.n_ff_exp.assign(L, 0);
  }

  if (const json* q = f.find("quantization_config")) {
    const std::string method = q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
                                   ? (*q)["quant_method"].get<std::string>()
                                   : "";
    const std::string format = q->is_object() && q->contains("format") && (*q)["format"].is_string()
                                   ? (*q)["format"].get<std::string>()
                                   : "";
    if (method != "compressed-tensors" || format.find("mxfp4") == std::string::npos)
      fail("%s: quantization_config {quant_method: '%s', format: '%s'} is not supported (only compressed-tensors "
           "mxfp4-pack-quantized)",
           path.c_str(), method.c_str(), format.c_str());
    c.mxfp4 = true;
  }
  if (const json* e = f.find("eos_token_id")) {
    if (e->is_number_integer()) c.eos_token_id = e->get<int64_t>();
    else if (e->is_array() && !e->empty() && (*e)[0].is_number_integer()) c.eos_token_id = (*e)[0].get<int64_t>();
  }
  c.name = f.str_or("_name_or_path", "");
  return c;
}

std::string hf_config_json(const model::HParams& hp, bool mxfp4, std::optional<int64_t> eos) {
  json t;
  t["architectures"] = {"KimiLinearForCausalLM"};
  t["model_type"] = "kimi_linear";
  t["num_hidden_layers"] = hp.n_layer;
  t["max_position_embeddings"] = hp.n_ctx_train;
  t["hidden_size"] = hp.n_embd;
  t["intermediate_size"] = hp.n_ff.empty() ? 0 : hp.n_ff[0];
  t["num_attention_heads"] = hp.n_head.empty() ? 0 : hp.n_head[0];
  t["num_key_value_heads"] = hp.n_head.empty() ? 0 : hp.n_head[0];
  t["rms_norm_eps"] = hp.rms_eps;
  t["vocab_size"] = hp.n_vocab;
  t["hidden_act"] = "situ";
  t["activation_situ_beta"] = hp.situ_beta;
  t["activation_situ_linear_beta"] = hp.situ_linear_beta;
  t["attn_res_block_size"] = hp.attn_res_block;
  json full = json::array(), kda = json::array();
  for (uint32_t il = 0; il < hp.n_layer; ++il) (hp.n_head_kv[il] ? full : kda).push_back(il + 1);
  json lac;
  lac["full_attn_layers"] = full;
  lac["kda_layers"] = kda;
  lac["num_heads"] = hp.n_head.empty() ? 0 : hp.n_head[0];
  lac["head_dim"] = hp.kda_head_dim;
  lac["short_conv_kernel_size"] = hp.ssm_d_conv;
  if (hp.kda_gate_lb) lac["gate_lower_bound"] = *hp.kda_gate_lb;
  t["linear_attn_config"] = lac;
  t["use_full_rank_gate"] = true;
  t["mla_use_nope"] = true;
  t["mla_use_output_gate"] = hp.has_attn_gate;
  if (hp.q_lora_rank) t["q_lora_rank"] = hp.q_lora_rank;
  else t["q_lora_rank"] = nullptr;
  t["kv_lora_rank"] = hp.kv_lora_rank;
  t["qk_nope_head_dim"] = hp.n_embd_head_k_mla - hp.n_rot;
  t["qk_rope_head_dim"] = hp.n_rot;
  t["v_head_dim"] = hp.n_embd_head_v_mla;
  t["first_k_dense_replace"] = hp.n_layer_dense_lead;
  t["num_experts"] = hp.n_expert;
  t["num_experts_per_token"] = hp.n_expert_used.empty() ? 0 : hp.n_expert_used.back();
  t["moe_intermediate_size"] = hp.n_ff_exp.empty() ? 0 : hp.n_ff_exp.back();
  t["num_shared_experts"] = hp.n_expert_shared;
  t["routed_scaling_factor"] = hp.expert_weights_scale;
  t["moe_renormalize"] = hp.expert_weights_norm;
  t["moe_router_activation_func"] = hp.gating == model::Gating::Softmax ? "softmax" : "sigmoid";
  t["use_grouped_topk"] = true;
  t["num_expert_group"] = 1;
  t["topk_group"] = hp.n_group_used ? hp.n_group_used : 1;
  t["topk_method"] = "noaux_tc";
  t["moe_layer_freq"] = 1;
  if (hp.n_embd_latent) t["routed_expert_hidden_size"] = hp.n_embd_latent;
  t["latent_moe_use_norm"] = hp.has_routed_norm;
  t["tie_word_embeddings"] = false;
  if (eos) t["eos_token_id"] = *eos;
  if (mxfp4) {
    json q;
    q["quant_method"] = "compressed-tensors";
    q["format"] = "mxfp4-pack-quantized";
    q["config_groups"] = {{"group_0", {{"format", "mxfp4-pack-quantized"},
                                       {"targets", {"Linear"}},
                                       {"weights", {{"num_bits", 4}, {"group_size", 32}, {"type", "float"}}}}}};
    q["ignore"] = {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp.*", "lm_head", "re:vision_tower.*"};
    t["quantization_config"] = q;
  }
  json top;
  top["architectures"] = {"KimiK3ForConditionalGeneration"};
  top["model_type"] = "kimi_k3";
  top["text_config"] = t;
  top["vision_config"] = {{"model_type", "kimi_k3_vision"}, {"hidden_size", 64}};
  if (eos) top["eos_token_id"] = *eos;
  top["torch_dtype"] = "bfloat16";
  return top.dump(2) + "\n";
}

}  // namespace k3::convert
