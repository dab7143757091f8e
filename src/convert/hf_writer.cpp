#include "convert/hf_writer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "convert/emit.h"
#include "convert/hf_config.h"
#include "convert/mmproj.h"
#include "convert/mxfp4_repack.h"
#include "convert/st_writer.h"
#include "model/registry.h"
#include "tensor/fp16.h"
#include "tokenizer/vocab.h"
#include "vision/model.h"
#include "vision/registry.h"

namespace k3::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;
using model::Transform;

float alog_from_ssm_a(float a) {
  if (!(a < 0.0f) || !std::isfinite(a)) fail("ssm_a value %g is not -exp of a float32", a);
  const float y0 = std::log(-a);
  float up = y0, down = y0;
  for (int k = 0; k < 64; ++k) {
    if (-std::exp(up) == a) return up;
    if (-std::exp(down) == a) return down;
    up = std::nextafter(up, INFINITY);
    down = std::nextafter(down, -INFINITY);
  }
  fail("ssm_a value %.9g is not -exp of any float32 near log(%.9g)", a, -a);
}

namespace {

struct HfTensor {
  std::string name;  // full checkpoint name
  st::DType dtype;
  std::vector<int64_t> shape;
  int shard;
  std::function<std::vector<uint8_t>()> bytes;
};

bool bf16_exact(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (bf16_to_fp32(fp32_to_bf16(v[i])) != v[i] && !std::isnan(v[i])) return false;
  return true;
}

std::vector<uint8_t> pack_floats(const std::vector<float>& v, st::DType d) {
  std::vector<uint8_t> out(v.size() * st::dtype_size(d));
  f32_to_type(d == st::DType::F32 ? GgmlType::F32 : d == st::DType::F16 ? GgmlType::F16 : GgmlType::BF16, v.data(),
              out.data(), v.size());
  return out;
}

std::vector<float> to_floats(const gguf::TensorInfo& t) {
  const int64_t n = t.nelements();
  std::vector<float> v(n);
  switch (t.type) {
    case GgmlType::F32: std::memcpy(v.data(), t.data, 4 * n); break;
    case GgmlType::BF16: dtype_to_f32(st::DType::BF16, t.data, v.data(), n); break;
    case GgmlType::F16: dtype_to_f32(st::DType::F16, t.data, v.data(), n); break;
    default: fail("tensor '%s' has type %s: a Hugging Face checkpoint can only hold float or MXFP4 weights", t.name.c_str(), type_name(t.type));
  }
  return v;
}

st::DType dtype_of(const gguf::TensorInfo& t) {
  switch (t.type) {
    case GgmlType::F32: return st::DType::F32;
    case GgmlType::BF16: return st::DType::BF16;
    case GgmlType::F16: return st::DType::F16;
    default:
      fail("tensor '%s' has type %s: a Hugging Face checkpoint can only hold float or MXFP4 weights (make-tiny "
           "--type/--expert-type f32|f16|bf16|mxfp4)",
           t.name.c_str(), type_name(t.type));
  }
}

std::vector<uint8_t> raw(const gguf::TensorInfo& t, uint64_t off = 0, uint64_t n = UINT64_MAX) {
  if (n == UINT64_MAX) n = t.nbytes - off;
  return std::vector<uint8_t>(t.data + off, t.data + off + n);
}

std::string base64(const std::string& in) {
  static const char* tb = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += tb[v >> 18], out += tb[(v >> 12) & 63], out += tb[(v >> 6) & 63], out += tb[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += tb[v >> 18], out += tb[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += tb[v >> 18], out += tb[(v >> 12) & 63], out += tb[(v >> 6) & 63], out += '=';
  }
  return out;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
  if (!out) fail("%s: cannot write", p.string().c_str());
}

class HfBuilder {
 public:
  HfBuilder(const gguf::Model& m, const HfLayout& lay) : m_(m), lay_(lay) {
    hp_ = model::HParams::from_metadata(m.meta());
    (void)model::bind_weights(m, hp_);  // validates the file and sets the presence features
  }

  void build() {
    const uint32_t L = hp_.n_layer;
    globals_ = static_cast<int>(L);
    model::for_each_tensor(hp_, [&](const model::TensorRef& r) { add(r); });
    if (!lay_.mmproj.empty()) add_vision();
  }

  void write(const std::string& dir) {
    fs::create_directories(dir);
    int nshards = 0;
    for (const auto& t : tensors_) nshards = std::max(nshards, t.shard + 1);
    std::map<std::string, std::string> weight_map;
    uint64_t total = 0;
    for (int s = 0; s < nshards; ++s) {
      const std::string file = strprintf("model-%06d-of-%06d.safetensors", s + 1, nshards);
      std::vector<st::Spec> specs;
      std::vector<const HfTensor*> ts;
      for (const auto& t : tensors_)
        if (t.shard == s) {
          specs.push_back({t.name, t.dtype, t.shape});
          ts.push_back(&t);
          weight_map[t.name] = file;
          total += specs.back().nbytes();
        }
      st::Writer w((fs::path(dir) / file).string(), specs);
      for (size_t i = 0; i < ts.size(); ++i) {
        std::vector<uint8_t> b = ts[i]->bytes();
        K3_ASSERT(b.size() == specs[i].nbytes());
        w.write(b.data(), b.size());
      }
      w.finish();
    }
    json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    write_text(fs::path(dir) / "model.safetensors.index.json", index.dump(2) + "\n");
    write_tokenizer(dir);
  }

 private:
  void push(const std::string& name, st::DType d, std::vector<int64_t> shape, int shard,
            std::function<std::vector<uint8_t>()> f) {
    tensors_.push_back({"language_model." + name, d, std::move(shape), shard, std::move(f)});
  }

  static std::vector<int64_t> hf_shape(const gguf::TensorInfo& t) {
    std::vector<int64_t> s(t.ne, t.ne + t.n_dims);
    std::reverse(s.begin(), s.end());
    return s;
  }

  // A float tensor the converter turns into F32: BF16 in the checkpoint when that is exact.
  void push_floats(const std::string& name, std::vector<float> v, std::vector<int64_t> shape, int shard) {
    const st::DType d = bf16_exact(v.data(), v.size()) ? st::DType::BF16 : st::DType::F32;
    push(name, d, std::move(shape), shard, [v = std::move(v), d] { return pack_floats(v, d); });
  }

  void add(const model::TensorRef& r) {
    const gguf::TensorInfo& t = m_.get(r.name);
    const int shard = r.il == model::kNoLayer ? globals_ : static_cast<int>(r.il);
    auto hf = [&](const std::string& pat) { return r.il == model::kNoLayer ? pat : strprintf(pat.c_str(), r.il); };
    const std::string pattern = r.def.hf;
    const gguf::TensorInfo* tp = &t;
    switch (r.def.transform) {
      case Transform::None:
        push(hf(pattern), dtype_of(t), hf_shape(t), shard, [tp] { return raw(*tp); });
        break;
      case Transform::ToF32:
        push_floats(hf(pattern), to_floats(t), hf_shape(t), shard);
        break;
      case Transform::ReshapeConv: {
        const int64_t K = t.ne[0], D = t.ne[2];
        push_floats(hf(pattern), to_floats(t), lay_.conv_2d ? std::vector<int64_t>{D, K} : std::vector<int64_t>{D, 1, K}, shard);
        break;
      }
      case Transform::NegExpALog: {
        // The real checkpoint stores more values than heads (128 for 96); the rest is padding.
        std::vector<float> a = to_floats(t);
        const size_t n = a.size();
        for (float& x : a) x = alog_from_ssm_a(x);
        const size_t stored = std::max<size_t>(n, hp_.kda_head_dim);
        for (size_t i = n; i < stored; ++i) a.push_back(100.0f + static_cast<float>(i));
        push(hf(pattern), st::DType::F32, {static_cast<int64_t>(stored)}, shard, [a] { return pack_floats(a, st::DType::F32); });
        break;
      }
      case Transform::FuseScore: {
        const size_t plus = pattern.find('+');
        std::vector<float> score = to_floats(t), norm(score.size()), proj(score.size());
        for (size_t q = 0; q < score.size(); ++q) {
          // norm · proj == score exactly: norm a power of two, proj the scaled score.
          const float n = std::ldexp(1.0f, static_cast<int>(q % 3) - 1);
          const float p = score[q] / n;
          const bool exact = p * n == score[q] || std::isnan(score[q]);
          norm[q] = exact ? n : 1.0f;
          proj[q] = exact ? p : score[q];
        }
        const int64_t H = static_cast<int64_t>(score.size());
        push_floats(hf(pattern.substr(0, plus)), norm, {H}, shard);
        int pshard = shard;
        if (lay_.scatter) pshard = shard == globals_ ? globals_ - 1 : shard + 1;
        push_floats(hf(pattern.substr(plus + 1)), proj, {1, H}, pshard);
        break;
      }
      case Transform::SplitKb: add_kv_b(r, hf(pattern), shard); break;
      case Transform::SplitVb: break;  // written with k_b
      case Transform::StackExperts: add_experts(r, t, hf(pattern), shard); break;
    }
  }

  void add_kv_b(const model::TensorRef& r, const std::string& name, int shard) {
    const gguf::TensorInfo& kb = m_.get(r.name);
    const gguf::TensorInfo& vb = m_.get(strprintf("blk.%u.attn_v_b.weight", r.il));
    if (kb.type != vb.type)
      fail("tensors '%s' (%s) and '%s' (%s) come from one kv_b_proj and must have the same type", kb.name.c_str(),
           type_name(kb.type), vb.name.c_str(), type_name(vb.type));
    const st::DType d = dtype_of(kb);
    const int64_t dn = kb.ne[0], R = kb.ne[1], H = kb.ne[2], dv = vb.ne[1];
    const size_t es = st::dtype_size(d);
    const gguf::TensorInfo *k = &kb, *v = &vb;
    push(name, d, {H * (dn + dv), R}, shard, [=] {
      std::vector<uint8_t> w(static_cast<size_t>(H * (dn + dv) * R) * es);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < dn; ++i)
          for (int64_t j = 0; j < R; ++j)
            std::memcpy(&w[((h * (dn + dv) + i) * R + j) * es], k->data + ((h * R + j) * dn + i) * es, es);
        for (int64_t m = 0; m < dv; ++m)
          std::memcpy(&w[((h * (dn + dv) + dn + m) * R) * es], v->data + ((h * dv + m) * R) * es, R * es);
      }
      return w;
    });
  }

  void add_experts(const model::TensorRef& r, const gguf::TensorInfo& t, const std::string& pat, int shard) {
    const int64_t cols = t.ne[0], rows = t.ne[1], E = t.ne[2];
    const uint64_t per = t.nbytes / static_cast<uint64_t>(E);
    const gguf::TensorInfo* tp = &t;
    for (int64_t e = 0; e < E; ++e) {
      std::string n = pat;
      n.replace(n.find("{E}"), 3, std::to_string(e));
      const std::string base = n.substr(0, n.size() - 6);  // strip "weight"
      const int s = lay_.scatter && e >= E / 2 ? shard + 1 : shard;
      if (t.type == GgmlType::MXFP4) {
        const st::DType sd = lay_.scale_e8m0 ? st::DType::F8_E8M0 : st::DType::U8;
        push(base + "weight_packed", st::DType::U8, {rows, cols / 2}, s, [=] {
          std::vector<uint8_t> p(rows * cols / 2), sc(rows * cols / 32);
          mxfp4_unpack_rows(tp->data + e * per, p.data(), sc.data(), rows, cols);
          return p;
        });
        push(base + "weight_scale", sd, {rows, cols / 32}, s, [=] {
          std::vector<uint8_t> p(rows * cols / 2), sc(rows * cols / 32);
          mxfp4_unpack_rows(tp->data + e * per, p.data(), sc.data(), rows, cols);
          return sc;
        });
      } else {
        push(n, dtype_of(t), {rows, cols}, s, [=] { return raw(*tp, e * per, per); });
      }
    }
    (void)r;
  }

  // The mmproj's tensors under their checkpoint names: blocks in one shard, the rest in the next
  // (as shards 95 and 96 of the real checkpoint); attn_qkv rows back in the interleaved order.
  void add_vision() {
    mmproj_ = vision::VisionModel::load(lay_.mmproj);
    vhp_ = mmproj_->hparams();
    const int vs = globals_ + 1;
    vision::for_each_vision_tensor(vhp_, [&](const vision::VTensor& v) {
      const gguf::TensorInfo* tp = &mmproj_->file().get(v.name);
      const std::vector<int64_t> shape(v.ne.rbegin(), v.ne.rend());
      const int shard = v.layer >= 0 ? vs : vs + 1;
      if (v.xf == vision::VTransform::Copy) {
        tensors_.push_back({v.hf, dtype_of(*tp), shape, shard, [tp] { return raw(*tp); }});
        return;
      }
      const vision::VisionHParams hp = vhp_;
      tensors_.push_back({v.hf, dtype_of(*tp), shape, shard, [tp, hp] {
                            const size_t row = tp->nbytes / static_cast<size_t>(tp->ne[1]);
                            std::vector<uint8_t> b(tp->nbytes);
                            for (int64_t r = 0; r < tp->ne[1]; ++r)
                              std::memcpy(b.data() + vision::qkv_source_row(r, hp) * row, tp->data + r * row, row);
                            return b;
                          }});
    });
  }

  void write_tokenizer(const std::string& dir) {
    const gguf::Metadata& meta = m_.meta();
    const auto& tokens = std::get<std::vector<std::string>>(meta.get_array("tokenizer.ggml.tokens").data);
    const auto& types = std::get<std::vector<int32_t>>(meta.get_array("tokenizer.ggml.token_type").data);
    std::string tk;
    size_t n_ranked = 0;
    while (n_ranked < types.size() && types[n_ranked] == 1) ++n_ranked;
    for (size_t id = 0; id < n_ranked; ++id)
      tk += base64(tok::token_text_to_bytes(tokens[id])) + " " + std::to_string(id) + "\n";
    write_text(fs::path(dir) / "tiktoken.model", tk);

    json dec = json::object();
    for (size_t id = n_ranked; id < tokens.size(); ++id) {
      if (tokens[id] == "<|reserved_token_" + std::to_string(id) + "|>") continue;  // unnamed: the converter names it
      dec[std::to_string(id)] = {{"content", tokens[id]}, {"lstrip", false}, {"normalized", false},
                                 {"rstrip", false}, {"single_word", false}, {"special", true}};
    }
    json tc;
    tc["added_tokens_decoder"] = dec;
    auto name_of = [&](const char* key) -> json {
      if (!meta.has(key)) return nullptr;
      const uint32_t id = meta.get_u32(key);
      return id < tokens.size() ? json(tokens[id]) : json(nullptr);
    };
    tc["bos_token"] = name_of("tokenizer.ggml.bos_token_id");
    // The tokenizer's own eos is [EOS] when the vocabulary has it; the model's stop token goes to
    // config.json (conversion.md §5.6).
    tc["eos_token"] = name_of("tokenizer.ggml.eos_token_id");
    for (size_t id = n_ranked; id < tokens.size(); ++id)
      if (tokens[id] == "[EOS]") tc["eos_token"] = "[EOS]";
    tc["pad_token"] = name_of("tokenizer.ggml.padding_token_id");
    tc["unk_token"] = nullptr;
    for (const char* k : {"add_bos_token", "add_eos_token"})
      if (meta.has(std::string("tokenizer.ggml.") + k)) tc[k] = meta.get_bool(std::string("tokenizer.ggml.") + k);
    tc["model_max_length"] = hp_.n_ctx_train;
    tc["tokenizer_class"] = "TikTokenTokenizer";
    tc["auto_map"] = {{"AutoTokenizer", {"tokenization_kimi.TikTokenTokenizer", nullptr}}};
    if (lay_.chat_template && meta.has("tokenizer.chat_template"))
      tc["chat_template"] = meta.get_str("tokenizer.chat_template");
    write_text(fs::path(dir) / "tokenizer_config.json", tc.dump(2) + "\n");

    std::optional<int64_t> eos;
    if (meta.has("tokenizer.ggml.eos_token_id")) eos = meta.get_u32("tokenizer.ggml.eos_token_id");
    bool mxfp4 = false;
    for (const auto* t : m_.tensors()) mxfp4 |= t->type == GgmlType::MXFP4;
    std::string config = hf_config_json(hp_, mxfp4, eos);
    if (mmproj_) {
      json c = json::parse(config);
      c["vision_config"] = vision_config_json(vhp_);
      config = c.dump(2) + "\n";
    }
    write_text(fs::path(dir) / "config.json", config);
    json gen;
    if (eos) gen["eos_token_id"] = *eos;
    if (meta.has("tokenizer.ggml.bos_token_id")) gen["bos_token_id"] = meta.get_u32("tokenizer.ggml.bos_token_id");
    gen["do_sample"] = false;
    write_text(fs::path(dir) / "generation_config.json", gen.dump(2) + "\n");
  }

  const gguf::Model& m_;
  HfLayout lay_;
  model::HParams hp_;
  std::unique_ptr<vision::VisionModel> mmproj_;
  vision::VisionHParams vhp_;
  int globals_ = 0;
  std::vector<HfTensor> tensors_;
};

}  // namespace

void write_hf_checkpoint(const gguf::Model& m, const std::string& dir, const HfLayout& layout) {
  HfBuilder b(m, layout);
  b.build();
  b.write(dir);
}

void write_hf_checkpoint(const std::string& gguf_path, const std::string& dir, const HfLayout& layout) {
  gguf::Model m = gguf::Model::open(gguf_path);
  write_hf_checkpoint(m, dir, layout);
}

}  // namespace k3::convert
