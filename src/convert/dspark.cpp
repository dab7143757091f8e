#include "convert/dspark.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "convert/safetensors.h"
#include "gguf/writer.h"
#include "spec/draft_file.h"
#include "tensor/fp16.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace k3::convert {

namespace {

json read_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream f(path);
  if (!f) fail("%s: cannot open", path.c_str());
  try {
    json j = json::parse(f);
    if (!j.is_object()) fail("not a JSON object");
    return j;
  } catch (const std::exception& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
}

// The draft's parameters from config.json (§1), with the converter's refusals (§3.3).
spec::DraftParams params_of(const json& c, const std::string& path, uint32_t block_size) {
  auto num = [&](const json& o, const char* k) -> const json& {
    if (!o.contains(k) || !o[k].is_number()) fail("%s: missing or non-numeric field '%s'", path.c_str(), k);
    return o[k];
  };
  auto u32 = [&](const char* k) {
    const json& v = num(c, k);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > UINT32_MAX)
      fail("%s: field '%s' must be a non-negative integer", path.c_str(), k);
    return v.get<uint32_t>();
  };
  auto flag = [&](const char* k) { return c.contains(k) && c[k].is_boolean() && c[k].get<bool>(); };
  if (flag("mla_use_nope")) fail("%s: mla_use_nope is true: the DSpark draft rotates its rope dims (not supported)", path.c_str());
  if (flag("mla_use_output_gate")) fail("%s: mla_use_output_gate is true (not supported)", path.c_str());
  if (c.contains("hidden_act") && c["hidden_act"] != "silu")
    fail("%s: hidden_act %s: only silu is supported", path.c_str(), c["hidden_act"].dump().c_str());
  if (c.value("markov_head_type", std::string("vanilla")) != "vanilla")
    fail("%s: markov_head_type %s: only vanilla is supported", path.c_str(), c["markov_head_type"].dump().c_str());
  spec::DraftParams p;
  p.n_layer = u32("num_hidden_layers"), p.n_embd = u32("hidden_size"), p.n_ff = u32("intermediate_size");
  p.n_ctx = u32("max_position_embeddings"), p.n_vocab = u32("vocab_size");
  if (c.contains("draft_vocab_size") && u32("draft_vocab_size") != p.n_vocab)
    fail("%s: draft_vocab_size %u differs from vocab_size %u (a reduced draft vocabulary is not supported)", path.c_str(),
         u32("draft_vocab_size"), p.n_vocab);
  p.n_head = u32("num_attention_heads"), p.q_lora = u32("q_lora_rank"), p.kv_lora = u32("kv_lora_rank");
  p.d_nope = u32("qk_nope_head_dim"), p.d_rope = u32("qk_rope_head_dim"), p.d_v = u32("v_head_dim");
  p.eps = num(c, "rms_norm_eps").get<float>();
  p.rope_base = num(c, "rope_theta").get<float>();
  const json* rp = c.contains("rope_parameters") ? &c["rope_parameters"] : c.contains("rope_scaling") ? &c["rope_scaling"] : nullptr;
  if (rp && rp->is_object()) {
    const std::string type = rp->value("rope_type", rp->value("type", std::string("default")));
    if (type == "yarn") {
      p.yarn = true;
      p.yarn_factor = num(*rp, "factor").get<float>();
      p.yarn_orig_ctx = num(*rp, "original_max_position_embeddings").get<uint32_t>();
      p.yarn_beta_fast = rp->value("beta_fast", 32.0f), p.yarn_beta_slow = rp->value("beta_slow", 1.0f);
      p.yarn_mscale = rp->value("mscale", 1.0f), p.yarn_mscale_all_dim = rp->value("mscale_all_dim", 0.0f);
      if (rp->contains("rope_theta")) p.rope_base = num(*rp, "rope_theta").get<float>();
    } else if (type != "default") {
      fail("%s: rope type '%s': only yarn or none", path.c_str(), type.c_str());
    }
  }
  if (!c.contains("target_layer_ids") || !c["target_layer_ids"].is_array())
    fail("%s: missing array 'target_layer_ids'", path.c_str());
  for (const json& v : c["target_layer_ids"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail("%s: target_layer_ids holds %s", path.c_str(), v.dump().c_str());
    p.taps.push_back(v.get<uint32_t>());
  }
  if (c.contains("num_target_layers") && u32("num_target_layers") != p.taps.size())
    fail("%s: num_target_layers %u but target_layer_ids has %zu entries", path.c_str(), u32("num_target_layers"), p.taps.size());
  p.target_embd = c.contains("target_hidden_size") ? u32("target_hidden_size") : p.n_embd;
  p.target_layers = u32("target_num_hidden_layers");
  p.mask_id = u32("mask_token_id");
  p.markov_rank = u32("markov_rank");
  p.block_size = block_size;
  return p;
}

}  // namespace

bool is_dspark_checkpoint(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "config.json");
  if (!f) return false;
  const json j = json::parse(f, nullptr, false);
  return j.is_object() && j.value("model_type", std::string()) == "k3_dspark";
}

void convert_dspark(const DraftConvertOptions& o) {
  const std::string cfg_path = (fs::path(o.src) / "config.json").string();
  const json cfg = read_config(o.src);
  if (o.block_size < 1) fail("--block-size must be >= 1");
  const spec::DraftParams p = params_of(cfg, cfg_path, o.block_size);

  // the shards: one model.safetensors, or an index
  std::map<std::string, std::unique_ptr<st::File>> files;
  std::map<std::string, const st::TensorView*> src;
  std::vector<std::string> shards;
  const fs::path index = fs::path(o.src) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream f(index);
    const json j = json::parse(f, nullptr, false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) fail("%s: no weight_map", index.c_str());
    std::set<std::string> s;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) s.insert(it.value().get<std::string>());
    shards.assign(s.begin(), s.end());
  } else {
    shards = {"model.safetensors"};
  }
  for (const std::string& sh : shards) {
    auto f = st::File::open((fs::path(o.src) / sh).string());
    for (const st::TensorView& t : f->tensors()) src[t.name] = &t;
    files[sh] = std::move(f);
  }

  std::vector<spec::DraftTensor> plan = spec::draft_tensors(p);
  std::set<std::string> placed = {"confidence_head.proj.weight", "confidence_head.proj.bias"};  // training only: dropped
  auto source = [&](const spec::DraftTensor& d) -> const st::TensorView& {
    auto it = src.find(d.hf);
    if (it == src.end()) fail("%s: missing tensor '%s'", o.src.c_str(), d.hf.c_str());
    placed.insert(d.hf);
    return *it->second;
  };
  auto gguf_type = [&](const st::TensorView& t) {
    switch (t.dtype) {
      case st::DType::BF16: return GgmlType::BF16;
      case st::DType::F16: return GgmlType::F16;
      case st::DType::F32: return GgmlType::F32;
      default: fail("%s: tensor '%s' has dtype %s (expected BF16, F16 or F32)", o.src.c_str(), t.name.c_str(), st::dtype_name(t.dtype));
    }
  };
  std::vector<gguf::TensorSpec> specs;
  std::vector<std::pair<const spec::DraftTensor*, const st::TensorView*>> work;
  for (const spec::DraftTensor& d : plan) {
    if (d.optional && (o.no_embd || !src.count(d.hf))) {
      if (src.count(d.hf)) placed.insert(d.hf);
      continue;
    }
    const st::TensorView& t = source(d);
    // expected source shape: the GGUF ne reversed; kv_b_proj: [nh * (d_nope + d_v), r_kv]
    std::vector<int64_t> want(d.ne.rbegin(), d.ne.rend());
    if (d.src == spec::DraftSource::SplitKb || d.src == spec::DraftSource::SplitVb)
      want = {static_cast<int64_t>(p.n_head) * (p.d_nope + p.d_v), p.kv_lora};
    if (t.shape != want) {
      std::string w = "[";
      for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
      fail("%s: tensor '%s' has shape %s, expected %s]", o.src.c_str(), t.name.c_str(), t.shape_string().c_str(), w.c_str());
    }
    specs.push_back({d.name, d.src == spec::DraftSource::Gain ? GgmlType::F32 : gguf_type(t), d.ne});
    work.push_back({&d, &t});
  }
  for (const auto& [name, t] : src)
    if (!placed.count(name))
      fail("%s: unexpected tensor '%s' (not part of a DSpark draft of this configuration; per-tap norms and other "
           "variants are not supported)",
           o.src.c_str(), name.c_str());

  gguf::Metadata meta;
  meta.set("general.name", gguf::Value::str(o.name.empty() ? fs::path(o.src).filename().string() : o.name));
  p.to_metadata(meta);
  GgmlType main = GgmlType::BF16;  // general.file_type: context_proj's type
  for (const gguf::TensorSpec& sp : specs)
    if (sp.name == "dspark_context_proj.weight") main = sp.type;
  meta.set("general.file_type", gguf::Value::u32(main == GgmlType::F32 ? 0 : main == GgmlType::F16 ? 1 : 32));
  for (const auto& [k, key] : {std::pair{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                               {"eos_token_id", "tokenizer.ggml.eos_token_id"},
                               {"pad_token_id", "tokenizer.ggml.padding_token_id"}})
    if (cfg.contains(k) && cfg[k].is_number_unsigned()) meta.set(key, gguf::Value::u32(cfg[k].get<uint32_t>()));

  gguf::Writer w(o.out, meta, specs);
  std::vector<uint8_t> buf;
  for (const auto& [d, t] : work) {
    const size_t es = st::dtype_size(t->dtype);
    if (d->src == spec::DraftSource::Copy) {
      w.write_tensor(d->name, t->data, t->nbytes());
      continue;
    }
    if (d->src == spec::DraftSource::Gain) {
      std::vector<float> g(static_cast<size_t>(t->nelements()));
      for (size_t i = 0; i < g.size(); ++i) {
        const uint8_t* e = t->data + i * es;
        if (t->dtype == st::DType::F32) std::memcpy(&g[i], e, 4);
        else {
          uint16_t h;
          std::memcpy(&h, e, 2);
          g[i] = t->dtype == st::DType::BF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
        }
      }
      w.write_tensor(d->name, g.data(), g.size() * 4);
      continue;
    }
    // kv_b_proj per head h: rows h*(d_n+d_v) + i (i < d_n) are key rows, the next d_v value rows.
    // attn_k_b (i, j, h) = W[h*(d_n+d_v) + i][j] (transposed per head); attn_v_b (j, m, h) = W[.. + d_n + m][j].
    const int64_t nh = p.n_head, dn = p.d_nope, dv = p.d_v, r = p.kv_lora;
    buf.resize(static_cast<size_t>(t->nbytes()) / (dn + dv) * (d->src == spec::DraftSource::SplitKb ? dn : dv));
    auto row = [&](int64_t h, int64_t i) { return t->data + ((h * (dn + dv) + i) * r) * es; };
    if (d->src == spec::DraftSource::SplitKb) {
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t j = 0; j < r; ++j)
          for (int64_t i = 0; i < dn; ++i) std::memcpy(&buf[((h * r + j) * dn + i) * es], row(h, i) + j * es, es);
    } else {
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t m = 0; m < dv; ++m) std::memcpy(&buf[(h * dv + m) * r * es], row(h, dn + m), r * es);
    }
    w.write_tensor(d->name, buf.data(), buf.size());
  }
  w.finish();
}

}  // namespace k3::convert
