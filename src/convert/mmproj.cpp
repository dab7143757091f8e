#include "convert/mmproj.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "vision/registry.h"

namespace k3::convert {

using json = nlohmann::json;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class MmprojBuilder {
 public:
  MmprojBuilder(Plan& p, const std::map<std::string, VisionSource>& src, const json& config, const std::string& path)
      : p_(p), src_(src), path_(path) {
    if (config.contains("vision_config") && config["vision_config"].is_object()) vc_ = config["vision_config"];
  }

  void run(const std::string& name) {
    vision::VisionHParams& hp = p_.vision;
    from_shapes(hp);
    from_config(hp);
    try {
      hp.validate();
    } catch (const Error& e) {
      fail("%s: vision_config: %s", path_.c_str(), e.what());
    }
    Part part;
    part.mmproj = true;
    part.no = static_cast<int>(p_.parts.size());
    std::map<std::string, bool> used;
    vision::for_each_vision_tensor(hp, [&](const vision::VTensor& v) {
      const VisionSource& s = need(v.hf, v.name);
      used[v.hf] = true;
      const std::vector<int64_t> hf_shape(v.ne.rbegin(), v.ne.rend());
      if (s.ref.t->shape != hf_shape)
        bad(s, v.name, strprintf("shape %s, expected %s (%s)", s.ref.t->shape_string().c_str(), shape_str(hf_shape).c_str(),
                                 hp.summary().c_str()));
      OutTensor t;
      t.name = v.name;
      t.ne = v.ne;
      t.type = s.ref.t->dtype == st::DType::F32 ? GgmlType::F32 : s.ref.t->dtype == st::DType::F16 ? GgmlType::F16 : GgmlType::BF16;
      t.permute_qk = v.xf == vision::VTransform::PermuteQK;
      t.src = {s.ref};
      t.src_bytes = t.nbytes = s.ref.t->nbytes();
      t.part = part.no;
      part.tensors.push_back(static_cast<int>(p_.tensors.size()));
      part.data_bytes += t.nbytes;
      part.src_bytes += t.src_bytes;
      p_.tensors.push_back(std::move(t));
    });
    for (const auto& [n, s] : src_)
      if (!used.count(n))
        fail("%s: tensor '%s' has no place in a %s mmproj (%s)", p_.shards[s.ref.shard]->path().c_str(), s.full.c_str(),
             vision::kProjectorType, hp.summary().c_str());
    const OutTensor& qkv0 = *std::find_if(p_.tensors.begin(), p_.tensors.end(),
                                          [](const OutTensor& t) { return t.name == "v.blk.0.attn_qkv.weight"; });
    part.src_shard = p_.tensors[part.tensors[0]].src[0].shard;
    part.file = mmproj_file_name(name, qkv0.type);
    hp.to_metadata(part.meta);
    part.meta.set("general.name", gguf::Value::str(name));
    part.meta.set("general.file_type", gguf::Value::u32(qkv0.type == GgmlType::F32 ? 0 : qkv0.type == GgmlType::F16 ? 1 : 32));
    std::vector<const OutTensor*> ts;
    for (int i : part.tensors) ts.push_back(&p_.tensors[i]);
    part.file_bytes = gguf_file_size(part.meta, ts);
    p_.notes.push_back(strprintf("mmproj: %zu vision tensors -> %s (%s)", part.tensors.size(), part.file.c_str(),
                                 hp.summary().c_str()));
    p_.parts.push_back(std::move(part));
  }

 private:
  const VisionSource& need(const std::string& hf, const std::string& gguf_name) {
    auto it = src_.find(hf);
    if (it == src_.end())
      fail("%s: the checkpoint has vision tensors but not '%s' (source of %s); use --no-mmproj to convert the text "
           "model alone",
           p_.index.index_path.empty() ? path_.c_str() : p_.index.index_path.c_str(), hf.c_str(), gguf_name.c_str());
    const st::DType d = it->second.ref.t->dtype;
    if (d != st::DType::BF16 && d != st::DType::F16 && d != st::DType::F32)
      bad(it->second, gguf_name, strprintf("dtype %s; vision tensors must be BF16, F16 or F32", st::dtype_name(d)));
    return it->second;
  }

  [[noreturn]] void bad(const VisionSource& s, const std::string& g, const std::string& why) {
    fail("%s: tensor '%s' (source of %s): %s", p_.shards[s.ref.shard]->path().c_str(), s.full.c_str(), g.c_str(), why.c_str());
  }

  const std::vector<int64_t>& shape(const std::string& hf) {
    return need(hf, "the vision hyperparameters").ref.t->shape;
  }

  // Widths from the tensor shapes (vision.md §2); heads come from the config.
  void from_shapes(vision::VisionHParams& hp) {
    const auto& patch = shape("vision_tower.patch_embed.proj.weight");  // [C, 3, p, p]
    const auto& pos = shape("vision_tower.patch_embed.pos_emb.weight");  // [H, W, C]
    if (patch.size() != 4 || patch[1] != 3 || patch[2] != patch[3])
      bad(src_.at("vision_tower.patch_embed.proj.weight"), "v.patch_embd.weight",
          "expected [C, 3, p, p], got " + shape_str(patch));
    if (pos.size() != 3) bad(src_.at("vision_tower.patch_embed.pos_emb.weight"), "v.position_embd.weight", "expected [H, W, C]");
    hp.n_embd = static_cast<uint32_t>(patch[0]);
    hp.patch = static_cast<uint32_t>(patch[2]);
    hp.pos_h = static_cast<uint32_t>(pos[0]), hp.pos_w = static_cast<uint32_t>(pos[1]);
    uint32_t L = 0;
    while (src_.count(strprintf("vision_tower.encoder.blocks.%u.wqkv.weight", L))) ++L;
    if (L == 0) fail("%s: the checkpoint has vision tensors but no vision_tower.encoder.blocks.0.wqkv.weight", path_.c_str());
    hp.n_layer = L;
    hp.n_ff = static_cast<uint32_t>(shape("vision_tower.encoder.blocks.0.mlp.fc0.weight")[0]);
    qkv_rows_ = shape("vision_tower.encoder.blocks.0.wqkv.weight")[0];
    hp.proj_hidden = static_cast<uint32_t>(shape("mm_projector.proj.0.weight")[0]);
    hp.n_proj = static_cast<uint32_t>(shape("mm_projector.proj.2.weight")[0]);
  }

  uint32_t config_u32(const char* key, uint32_t from_shapes) {
    if (!vc_.contains(key)) return from_shapes;
    const json& v = vc_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail("%s: vision_config.%s must be a positive integer", path_.c_str(), key);
    const uint32_t c = v.get<uint32_t>();
    if (c != from_shapes)
      p_.notes.push_back(strprintf("warning: %s: vision_config.%s = %u, but the tensor shapes say %u; using the shapes",
                                   path_.c_str(), key, c, from_shapes));
    return from_shapes;
  }

  float config_f32(const char* key, float fallback) {
    if (!vc_.contains(key)) return fallback;
    if (!vc_[key].is_number()) fail("%s: vision_config.%s must be a number", path_.c_str(), key);
    return vc_[key].get<float>();
  }

  void from_config(vision::VisionHParams& hp) {
    config_u32("patch_size", hp.patch);
    config_u32("vt_hidden_size", hp.n_embd);
    config_u32("vt_num_hidden_layers", hp.n_layer);
    config_u32("vt_intermediate_size", hp.n_ff);
    config_u32("init_pos_emb_height", hp.pos_h);
    config_u32("init_pos_emb_width", hp.pos_w);
    config_u32("text_hidden_size", hp.n_proj);
    if (!vc_.contains("vt_num_attention_heads") || !vc_["vt_num_attention_heads"].is_number_integer())
      fail("%s: missing or mistyped vision_config.vt_num_attention_heads (the head count cannot be read from the "
           "tensor shapes)",
           path_.c_str());
    hp.n_head = vc_["vt_num_attention_heads"].get<uint32_t>();
    if (hp.n_head == 0 || qkv_rows_ % (3 * int64_t{hp.n_head}) != 0)
      fail("%s: vision_config.vt_num_attention_heads = %u does not divide the %lld qkv rows into 3 parts of whole heads",
           path_.c_str(), hp.n_head, static_cast<long long>(qkv_rows_));
    hp.head_dim = static_cast<uint32_t>(qkv_rows_ / 3 / hp.n_head);
    if (vc_.contains("merge_kernel_size") && vc_["merge_kernel_size"] != json::array({2, 2}))
      fail("%s: vision_config.merge_kernel_size is %s; only [2, 2] is supported", path_.c_str(),
           vc_["merge_kernel_size"].dump().c_str());
    for (const auto& [key, want] : {std::pair{"mm_projector_type", "patchmergerv2"}, std::pair{"merge_type", "sd2_tpool"}})
      if (vc_.contains(key) && vc_[key] != want)
        fail("%s: vision_config.%s is %s; k3 runs '%s'", path_.c_str(), key, vc_[key].dump().c_str(), want);
    hp.eps = config_f32("vt_rms_norm_eps", 0.0078125f);
    hp.proj_eps = config_f32("projector_rms_norm_eps", 1e-5f);
    if (vc_.contains("in_patch_limit")) {
      const json& v = vc_["in_patch_limit"];
      if (!v.is_number_integer() || v.get<int64_t>() < 4 || v.get<int64_t>() > INT32_MAX)
        fail("%s: vision_config.in_patch_limit must be an integer >= 4", path_.c_str());
      hp.in_patch_limit = v.get<uint32_t>();
    }
    if (vc_.contains("pos_emb_interpolation")) {
      const json& v = vc_["pos_emb_interpolation"];
      if (v == "bicubic") hp.interp = vision::PosInterp::Bicubic;
      else if (v == "bilinear") hp.interp = vision::PosInterp::Bilinear;
      else fail("%s: vision_config.pos_emb_interpolation is %s (bicubic or bilinear)", path_.c_str(), v.dump().c_str());
    }
  }

  Plan& p_;
  const std::map<std::string, VisionSource>& src_;
  std::string path_;
  json vc_ = json::object();
  int64_t qkv_rows_ = 0;
};

}  // namespace

void plan_mmproj(Plan& p, const std::map<std::string, VisionSource>& sources, const json& config,
                 const std::string& config_path, const std::string& name) {
  MmprojBuilder(p, sources, config, config_path).run(name);
}

json vision_config_json(const vision::VisionHParams& hp) {
  return json{{"model_type", "moonvit"},
              {"patch_size", hp.patch},
              {"init_pos_emb_height", hp.pos_h},
              {"init_pos_emb_width", hp.pos_w},
              {"vt_hidden_size", hp.n_embd},
              {"vt_num_attention_heads", hp.n_head},
              {"vt_num_hidden_layers", hp.n_layer},
              {"vt_intermediate_size", hp.n_ff},
              {"merge_kernel_size", {hp.merge, hp.merge}},
              {"mm_projector_type", "patchmergerv2"},
              {"merge_type", "sd2_tpool"},
              {"text_hidden_size", hp.n_proj},
              {"vt_rms_norm_eps", hp.eps},
              {"projector_rms_norm_eps", hp.proj_eps},
              {"pos_emb_interpolation", vision::interp_name(hp.interp)},
              {"in_patch_limit", hp.in_patch_limit}};
}

std::string mmproj_file_name(const std::string& name, GgmlType type) {
  std::string t = type_name(type);
  for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "mmproj-" + name + "-" + t + ".gguf";
}

}  // namespace k3::convert
