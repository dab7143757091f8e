#include "convert/plan.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/error.h"
#include "gguf/writer.h"
#include "convert/mmproj.h"
#include "tokenizer/vocab.h"
#include "vision/registry.h"

namespace k3::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;
using model::Transform;

const char* outtype_name(OutType t) {
  switch (t) {
    case OutType::Auto: return "auto";
    case OutType::BF16: return "bf16";
    case OutType::F16: return "f16";
    case OutType::F32: return "f32";
  }
  return "?";
}

std::vector<int> parse_shard_spec(const std::string& spec, int n) {
  std::set<int> out;
  std::stringstream ss(spec);
  std::string item;
  auto num = [&](const std::string& s) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end || errno) fail("--shards '%s': '%s' is not a number", spec.c_str(), s.c_str());
    if (v < 1 || v > n) fail("--shards '%s': %ld is outside 1..%d (the output has %d parts)", spec.c_str(), v, n, n);
    return static_cast<int>(v);
  };
  while (std::getline(ss, item, ',')) {
    if (item.empty()) fail("--shards '%s': empty item", spec.c_str());
    size_t dash = item.find('-');
    if (dash == std::string::npos) {
      out.insert(num(item));
    } else {
      int a = num(item.substr(0, dash)), b = num(item.substr(dash + 1));
      if (a > b) fail("--shards '%s': range %d-%d is empty", spec.c_str(), a, b);
      for (int i = a; i <= b; ++i) out.insert(i);
    }
  }
  if (out.empty()) fail("--shards '%s' selects nothing", spec.c_str());
  return {out.begin(), out.end()};
}

// ---- GGUF size arithmetic (gguf-contract.md §1) ----
namespace {
uint64_t pad32(uint64_t x) { return (x + 31) / 32 * 32; }

uint64_t value_bytes(const gguf::Value& v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8 + std::get<std::string>(v.v).size();
    case ValueType::ARRAY: {
      const gguf::Array& a = std::get<gguf::Array>(v.v);
      uint64_t n = 4 + 8;
      if (a.elem == ValueType::STRING) {
        for (const auto& s : std::get<std::vector<std::string>>(a.data)) n += 8 + s.size();
      } else {
        gguf::Value one;
        one.type = a.elem;
        n += a.size() * value_bytes(one);
      }
      return n;
    }
  }
  return 0;
}
}  // namespace

uint64_t gguf_file_size(const gguf::Metadata& meta, const std::vector<const OutTensor*>& tensors) {
  uint64_t n = 4 + 4 + 8 + 8;
  for (const auto& kv : meta.kvs()) n += 8 + kv.key.size() + 4 + value_bytes(kv.value);
  for (const OutTensor* t : tensors) n += 8 + t->name.size() + 4 + 8 * t->ne.size() + 4 + 8;
  n = pad32(n);
  for (const OutTensor* t : tensors) n += pad32(t->nbytes);
  return n;
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// The ggml shape of a row-major HF shape: reversed, without trailing 1s beyond the first dim.
std::vector<int64_t> reversed(const std::vector<int64_t>& s) {
  std::vector<int64_t> r(s.rbegin(), s.rend());
  if (r.empty()) r.push_back(1);
  return r;
}

bool same_shape(std::vector<int64_t> a, std::vector<int64_t> b) {
  a.resize(std::max<size_t>(a.size(), 4), 1);
  b.resize(std::max<size_t>(b.size(), 4), 1);
  return a == b;
}

GgmlType float_out(OutType ot, st::DType src) {
  switch (ot) {
    case OutType::BF16: return GgmlType::BF16;
    case OutType::F16: return GgmlType::F16;
    case OutType::F32: return GgmlType::F32;
    case OutType::Auto: break;
  }
  // Lossless: a 16-bit source keeps its type, F32 stays F32.
  if (src == st::DType::F16) return GgmlType::F16;
  if (src == st::DType::F32) return GgmlType::F32;
  return GgmlType::BF16;
}

std::string sanitize(std::string s) {
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return s.empty() ? std::string("model") : s;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::string& path) {
  std::string text = read_text(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("%s: not valid JSON: %s", path.c_str(), e.what());
  }
}

class Builder {
 public:
  Builder(const PlanOptions& opt, Plan& p) : opt_(opt), p_(p) {}

  void run() {
    const std::string meta_dir = opt_.meta.empty() ? opt_.src : opt_.meta;
    p_.cfg = read_hf_config((fs::path(meta_dir) / "config.json").string());
    open_shards();
    collect_text_tensors();
    detect_features();
    build_tensors();
    check_leftovers();
    build_metadata(meta_dir);
    build_parts();
    if (vision_.empty()) return;
    if (opt_.no_mmproj) {
      p_.skipped_vision = vision_.size();
      p_.notes.push_back(strprintf("mmproj: %zu vision tensors skipped (--no-mmproj)", vision_.size()));
      return;
    }
    plan_mmproj(p_, vision_, read_json(p_.cfg.path), p_.cfg.path, name_);
  }

 private:
  struct Src {
    SrcRef ref;
    std::string full;  // name in the checkpoint
    bool used = false;
  };

  void open_shards() {
    p_.index = st::Index::load(opt_.src);
    const auto& ix = p_.index;
    for (const auto& s : ix.shards) p_.shards.push_back(st::File::open((fs::path(opt_.src) / s).string()));
    if (ix.index_path.empty()) return;
    for (const auto& [name, si] : ix.shard_of)
      if (!p_.shards[si]->find(name))
        fail("%s: the index places tensor '%s' in this shard, but the shard has no such tensor (index %s)",
             p_.shards[si]->path().c_str(), name.c_str(), ix.index_path.c_str());
    for (size_t si = 0; si < p_.shards.size(); ++si)
      for (const auto& t : p_.shards[si]->tensors()) {
        auto it = ix.shard_of.find(t.name);
        if (it == ix.shard_of.end() || it->second != static_cast<int>(si))
          fail("%s: holds tensor '%s', which the index %s", p_.shards[si]->path().c_str(), t.name.c_str(),
               it == ix.shard_of.end() ? "does not list" : ("places in " + ix.shards[it->second]).c_str());
      }
  }

  void collect_text_tensors() {
    for (const auto& [full, si] : p_.index.shard_of) {
      std::string n = full;
      if (n.rfind("language_model.", 0) == 0) n = n.substr(15);
      if (vision::is_vision_source_name(n) || vision::is_vision_source_name(full)) {
        vision_.emplace(n, VisionSource{{si, p_.shards[si]->find(full)}, full});
        continue;
      }
      if (n.size() != full.size()) prefix_ = "language_model.";
      Src s{{si, p_.shards[si]->find(full)}, full, false};
      if (!by_name_.emplace(n, s).second)
        fail("%s: tensor '%s' appears both with and without the 'language_model.' prefix",
             p_.shards[si]->path().c_str(), full.c_str());
    }
    if (by_name_.empty()) fail("%s: the checkpoint has no text-model tensors", opt_.src.c_str());
  }

  bool has(const std::string& n) const { return by_name_.count(n) > 0; }

  void detect_features() {
    model::HParams& hp = p_.cfg.hp;
    hp.has_attn_gate = hp.has_routed_norm = hp.has_shexp = false;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      const std::string L = "model.layers." + std::to_string(il) + ".";
      if (hp.attn_kind(il) == model::AttnKind::MLA && has(L + "self_attn.g_proj.weight")) hp.has_attn_gate = true;
      if (hp.ffn_kind(il) == model::FfnKind::MoE) {
        if (has(L + "block_sparse_moe.routed_expert_norm.weight")) hp.has_routed_norm = true;
        if (has(L + "block_sparse_moe.shared_experts.gate_proj.weight")) hp.has_shexp = true;
      }
    }
    try {
      hp.validate();
    } catch (const Error& e) {
      fail("%s: %s", p_.cfg.path.c_str(), e.what());
    }
  }

  Src& need(const std::string& hf, const std::string& gguf_name) {
    auto it = by_name_.find(hf);
    if (it == by_name_.end())
      fail("%s: missing tensor '%s' (source of %s; config.json: %s)",
           p_.index.index_path.empty() ? opt_.src.c_str() : p_.index.index_path.c_str(), (prefix_ + hf).c_str(),
           gguf_name.c_str(), layer_note(gguf_name).c_str());
    it->second.used = true;
    return it->second;
  }

  std::string layer_note(const std::string& gguf_name) const {
    unsigned il = 0;
    if (std::sscanf(gguf_name.c_str(), "blk.%u.", &il) != 1) return "global tensor";
    const auto& hp = p_.cfg.hp;
    if (il >= hp.n_layer) return "?";
    return strprintf("layer %u is %s + %s", il, hp.attn_kind(il) == model::AttnKind::MLA ? "MLA" : "KDA",
                     hp.ffn_kind(il) == model::FfnKind::MoE ? "MoE" : "dense FFN");
  }

  [[noreturn]] void bad(const Src& s, const std::string& gguf_name, const std::string& why) {
    fail("%s: tensor '%s' (source of %s): %s", p_.shards[s.ref.shard]->path().c_str(), s.full.c_str(),
         gguf_name.c_str(), why.c_str());
  }

  void need_float(const Src& s, const std::string& g) {
    if (!st::dtype_is_float(s.ref.t->dtype) || s.ref.t->dtype == st::DType::F64)
      bad(s, g, strprintf("dtype %s; expected BF16, F16 or F32", st::dtype_name(s.ref.t->dtype)));
  }

  void need_shape(const Src& s, const std::string& g, const std::vector<int64_t>& hf_expected) {
    if (s.ref.t->shape != hf_expected)
      bad(s, g, strprintf("shape %s, expected %s", s.ref.t->shape_string().c_str(), shape_str(hf_expected).c_str()));
  }

  static std::vector<int64_t> hf_of(const std::vector<int64_t>& ne) {
    std::vector<int64_t> r(ne.rbegin(), ne.rend());
    while (r.size() > 1 && r.front() == 1) r.erase(r.begin());
    return r;
  }

  void build_tensors() {
    const model::HParams& hp = p_.cfg.hp;
    model::for_each_tensor(hp, [&](const model::TensorRef& r) {
      OutTensor t;
      t.name = r.name;
      t.xf = r.def.transform;
      t.ne.assign(r.shape.ne, r.shape.ne + r.shape.n_dims);
      const uint32_t il = r.il == model::kNoLayer ? 0 : r.il;
      auto hf_name = [&](const std::string& pat) {
        return r.il == model::kNoLayer ? pat : strprintf(pat.c_str(), r.il);
      };
      std::string pattern = r.def.hf;
      const std::string& g = t.name;
      switch (t.xf) {
        case Transform::None:
        case Transform::ToF32: {
          Src& s = need(hf_name(pattern), g);
          need_float(s, g);
          if (!same_shape(reversed(s.ref.t->shape), t.ne))
            bad(s, g, strprintf("shape %s, expected %s", s.ref.t->shape_string().c_str(), shape_str(hf_of(t.ne)).c_str()));
          t.src = {s.ref};
          t.type = r.def.types == model::TypeRule::KeepF32 || r.def.types == model::TypeRule::Router
                       ? GgmlType::F32
                       : float_out(opt_.outtype, s.ref.t->dtype);
          t.src_bytes = s.ref.t->nbytes();
          break;
        }
        case Transform::ReshapeConv: {
          Src& s = need(hf_name(pattern), g);
          need_float(s, g);
          const int64_t K = t.ne[0], D = t.ne[2];
          const auto& sh = s.ref.t->shape;
          if (!(sh == std::vector<int64_t>{D, 1, K} || sh == std::vector<int64_t>{D, K}))
            bad(s, g, strprintf("shape %s, expected [%" PRId64 ", 1, %" PRId64 "] or [%" PRId64 ", %" PRId64 "]",
                                s.ref.t->shape_string().c_str(), D, K, D, K));
          t.src = {s.ref};
          t.type = GgmlType::F32;
          t.src_bytes = s.ref.t->nbytes();
          break;
        }
        case Transform::NegExpALog: {
          Src& s = need(hf_name(pattern), g);
          need_float(s, g);
          if (s.ref.t->nelements() < t.ne[0])
            bad(s, g, strprintf("%" PRId64 " values, but num_attention_heads = %" PRId64 " are needed",
                                s.ref.t->nelements(), t.ne[0]));
          t.src = {s.ref};
          t.type = GgmlType::F32;
          t.src_bytes = t.ne[0] * st::dtype_size(s.ref.t->dtype);
          break;
        }
        case Transform::FuseScore: {
          size_t plus = pattern.find('+');
          K3_ASSERT(plus != std::string::npos);
          Src& norm = need(hf_name(pattern.substr(0, plus)), g);
          Src& proj = need(hf_name(pattern.substr(plus + 1)), g);
          const int64_t H = t.ne[0];
          need_float(norm, g);
          need_float(proj, g);
          need_shape(norm, g, {H});
          if (!(proj.ref.t->shape == std::vector<int64_t>{1, H} || proj.ref.t->shape == std::vector<int64_t>{H}))
            bad(proj, g, strprintf("shape %s, expected [1, %" PRId64 "]", proj.ref.t->shape_string().c_str(), H));
          t.src = {norm.ref, proj.ref};
          t.type = GgmlType::F32;
          t.src_bytes = norm.ref.t->nbytes() + proj.ref.t->nbytes();
          break;
        }
        case Transform::SplitKb:
        case Transform::SplitVb: {
          Src& s = need(hf_name(pattern), g);
          need_float(s, g);
          t.heads = hp.n_head[il];
          t.d_nope = hp.d_nope();
          t.d_v = hp.n_embd_head_v_mla;
          t.r_kv = hp.kv_lora_rank;
          if (p_.cfg.n_kv_heads != hp.n_head[il])
            fail("%s: num_key_value_heads = %u differs from num_attention_heads = %u; the kv_b_proj split needs them "
                 "equal",
                 p_.cfg.path.c_str(), p_.cfg.n_kv_heads, hp.n_head[il]);
          need_shape(s, g, {t.heads * (t.d_nope + t.d_v), t.r_kv});
          t.src = {s.ref};
          t.type = float_out(opt_.outtype, s.ref.t->dtype);
          t.src_bytes = static_cast<uint64_t>(t.heads) * (t.xf == Transform::SplitKb ? t.d_nope : t.d_v) * t.r_kv *
                        st::dtype_size(s.ref.t->dtype);
          break;
        }
        case Transform::StackExperts: build_experts(t, r, hf_name(pattern)); break;
      }
      const TypeInfo& ti = type_info(t.type);
      K3_ASSERT(t.ne[0] % ti.block == 0);
      t.nbytes = row_size(t.type, t.ne[0]);
      for (size_t d = 1; d < t.ne.size(); ++d) t.nbytes *= static_cast<uint64_t>(t.ne[d]);
      p_.tensors.push_back(std::move(t));
    });
  }

  void build_experts(OutTensor& t, const model::TensorRef& r, const std::string& pattern_il) {
    const std::string& g = t.name;
    t.cols = t.ne[0];
    t.rows = t.ne[1];
    const int64_t E = t.ne[2];
    auto at = [&](int64_t e) {
      std::string n = pattern_il;
      size_t pos = n.find("{E}");
      K3_ASSERT(pos != std::string::npos);
      return n.replace(pos, 3, std::to_string(e));
    };
    const std::string w0 = at(0);
    const std::string base = w0.substr(0, w0.size() - std::string("weight").size());  // "...w1."
    t.mxfp4 = has(base + "weight_packed");
    if (!t.mxfp4 && !has(w0) && p_.cfg.mxfp4) t.mxfp4 = true;  // let need() name the packed tensor
    uint64_t src_bytes = 0;
    st::DType first_dtype = st::DType::BF16;
    for (int64_t e = 0; e < E; ++e) {
      const std::string w = at(e);
      const std::string b = w.substr(0, w.size() - std::string("weight").size());
      if (t.mxfp4) {
        if (has(w)) bad(by_name_.at(w), g, "the experts of this stack mix MXFP4 and float weights");
        if (t.cols % 32 != 0)
          fail("%s: expert matrices of %s have %" PRId64 " columns, not a multiple of 32 (MXFP4 group size)",
               p_.cfg.path.c_str(), g.c_str(), t.cols);
        Src& pk = need(b + "weight_packed", g);
        Src& sc = need(b + "weight_scale", g);
        if (pk.ref.t->dtype != st::DType::U8 && pk.ref.t->dtype != st::DType::I8)
          bad(pk, g, strprintf("dtype %s; MXFP4 packed weights must be U8", st::dtype_name(pk.ref.t->dtype)));
        if (sc.ref.t->dtype != st::DType::U8 && sc.ref.t->dtype != st::DType::F8_E8M0 && sc.ref.t->dtype != st::DType::I8)
          bad(sc, g, strprintf("dtype %s; MXFP4 scales must be U8 or F8_E8M0", st::dtype_name(sc.ref.t->dtype)));
        need_shape(pk, g, {t.rows, t.cols / 2});
        need_shape(sc, g, {t.rows, t.cols / 32});
        t.src.push_back(pk.ref);
        t.src.push_back(sc.ref);
        src_bytes += pk.ref.t->nbytes() + sc.ref.t->nbytes();
      } else {
        if (has(b + "weight_packed")) bad(by_name_.at(b + "weight_packed"), g, "the experts of this stack mix MXFP4 and float weights");
        Src& s = need(w, g);
        need_float(s, g);
        need_shape(s, g, {t.rows, t.cols});
        if (e == 0) first_dtype = s.ref.t->dtype;
        t.src.push_back(s.ref);
        src_bytes += s.ref.t->nbytes();
      }
    }
    (void)r;
    t.type = t.mxfp4 ? GgmlType::MXFP4 : float_out(opt_.outtype, first_dtype);
    t.src_bytes = src_bytes;
  }

  void check_leftovers() {
    for (const auto& [n, s] : by_name_) {
      if (s.used) continue;
      const std::string& path = p_.shards[s.ref.shard]->path();
      if (n.size() > 14 && n.compare(n.size() - 14, 14, ".weight_packed") == 0)
        fail("%s: tensor '%s' is MXFP4-packed, but only routed experts may be (it has no place in the GGUF)",
             path.c_str(), s.full.c_str());
      fail("%s: tensor '%s' has no place in a kimi-k3 GGUF with this config.json (%s): unknown name, or a tensor the "
           "hyperparameters do not call for",
           path.c_str(), s.full.c_str(), layer_hint(n).c_str());
    }
  }

  std::string layer_hint(const std::string& hf) const {
    unsigned il = 0;
    if (std::sscanf(hf.c_str(), "model.layers.%u.", &il) != 1) return "global";
    const auto& hp = p_.cfg.hp;
    if (il >= hp.n_layer) return strprintf("layer %u, but num_hidden_layers = %u", il, hp.n_layer);
    return strprintf("layer %u is %s + %s", il, hp.attn_kind(il) == model::AttnKind::MLA ? "MLA" : "KDA",
                     hp.ffn_kind(il) == model::FfnKind::MoE ? "MoE" : "dense FFN");
  }

  void build_metadata(const std::string& meta_dir) {
    gguf::Metadata& m = p_.meta;
    const model::HParams& hp = p_.cfg.hp;
    try {
      hp.to_metadata(m);
    } catch (const Error& e) {
      fail("%s: %s", p_.cfg.path.c_str(), e.what());
    }
    std::string name = opt_.name;
    if (name.empty()) name = fs::path(opt_.src).lexically_normal().filename().string();
    if (name.empty()) name = fs::absolute(opt_.src).lexically_normal().parent_path().filename().string();
    name_ = sanitize(name);
    m.set("general.name", gguf::Value::str(name_));
    bool any_mxfp4 = false;
    GgmlType main = GgmlType::BF16;
    for (const auto& t : p_.tensors) {
      any_mxfp4 |= t.type == GgmlType::MXFP4;
      if (t.name == "token_embd.weight") main = t.type;
    }
    const uint32_t ftype = any_mxfp4 ? 38 : main == GgmlType::F32 ? 0 : main == GgmlType::F16 ? 1 : 32;
    m.set("general.file_type", gguf::Value::u32(ftype));
    m.set("general.quantization_version", gguf::Value::u32(2));
    build_vocab(meta_dir);
  }

  void build_vocab(const std::string& meta_dir) {
    const std::string tk = (fs::path(meta_dir) / "tiktoken.model").string();
    const std::string tcp = (fs::path(meta_dir) / "tokenizer_config.json").string();
    if (!fs::exists(tk)) fail("%s: missing (the vocabulary is read from it)", tk.c_str());
    if (!fs::exists(tcp)) fail("%s: missing (special tokens are read from it)", tcp.c_str());
    const int32_t n_vocab = static_cast<int32_t>(p_.cfg.hp.n_vocab);
    tok::VocabSpec v = tok::vocab_from_tiktoken(tk, tcp, n_vocab);
    if (v.ranked.size() > static_cast<size_t>(n_vocab))
      fail("%s: %zu tokens, more than vocab_size = %d in %s", tk.c_str(), v.ranked.size(), n_vocab, p_.cfg.path.c_str());
    for (const auto& sp : v.specials)
      if (sp.id >= n_vocab)
        fail("%s: added token %d ('%s') is outside vocab_size = %d of %s", tcp.c_str(), sp.id, sp.text.c_str(), n_vocab,
             p_.cfg.path.c_str());
    // eos: the tokenizer's, then restored to the model's stop token from config.json or
    // generation_config.json (conversion.md §5.6).
    std::optional<int64_t> eos = p_.cfg.eos_token_id;
    const std::string gc = (fs::path(meta_dir) / "generation_config.json").string();
    if (!eos && fs::exists(gc)) {
      json g = read_json(gc);
      if (g.is_object() && g.contains("eos_token_id")) {
        const json& e = g["eos_token_id"];
        if (e.is_number_integer()) eos = e.get<int64_t>();
        else if (e.is_array() && !e.empty() && e[0].is_number_integer()) eos = e[0].get<int64_t>();
      }
    }
    if (eos) {
      if (*eos < 0 || *eos >= n_vocab)
        fail("%s: eos_token_id = %lld is outside vocab_size = %d", p_.cfg.path.c_str(), (long long)*eos, n_vocab);
      v.eos_id = static_cast<int32_t>(*eos);
    }
    // Chat template: --chat-template FILE, else the checkpoint's own, else none.
    if (!opt_.chat_template_file.empty()) {
      v.chat_template = read_text(opt_.chat_template_file);
      p_.notes.push_back("chat template: " + opt_.chat_template_file);
    } else if (!v.chat_template.empty()) {
      p_.notes.push_back("chat template: tokenizer_config.json");
    } else if (fs::exists(fs::path(meta_dir) / "chat_template.jinja")) {
      v.chat_template = read_text((fs::path(meta_dir) / "chat_template.jinja").string());
      p_.notes.push_back("chat template: chat_template.jinja");
    } else {
      p_.notes.push_back("chat template: none in the checkpoint and no --chat-template given; none written");
    }
    tok::write_vocab(v, p_.meta);
  }

  void build_parts() {
    // One part per source shard that holds text tensors, in shard order.
    std::vector<int> part_of_shard(p_.shards.size(), -1);
    std::vector<bool> text(p_.shards.size(), false);
    for (const auto& [n, s] : by_name_) text[s.ref.shard] = true;
    int nparts = 0;
    for (size_t si = 0; si < p_.shards.size(); ++si)
      if (text[si]) part_of_shard[si] = nparts++;
    p_.n_text_parts = nparts;
    p_.parts.resize(nparts);
    for (size_t si = 0; si < p_.shards.size(); ++si)
      if (part_of_shard[si] >= 0) p_.parts[part_of_shard[si]].src_shard = static_cast<int>(si);
    // A tensor goes with the first shard that holds any of its sources.
    for (auto& t : p_.tensors) {
      int first = INT32_MAX;
      for (const auto& s : t.src) first = std::min(first, s.shard);
      t.part = part_of_shard[first];
    }
    std::vector<int> order(p_.tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const OutTensor &x = p_.tensors[a], &y = p_.tensors[b];
      if (x.src[0].shard != y.src[0].shard) return x.src[0].shard < y.src[0].shard;
      return x.src[0].t->begin < y.src[0].t->begin;
    });
    for (int i : order) p_.parts[p_.tensors[i].part].tensors.push_back(i);
    const int32_t total = static_cast<int32_t>(p_.tensors.size());
    for (int i = 0; i < nparts; ++i) {
      Part& part = p_.parts[i];
      part.no = i;
      part.file = fs::path(gguf::split_path(name_, i + 1, nparts)).filename().string();
      part.meta = gguf::split_metadata(p_.meta, static_cast<uint16_t>(i), static_cast<uint16_t>(nparts), total);
      std::vector<const OutTensor*> ts;
      for (int ti : part.tensors) {
        ts.push_back(&p_.tensors[ti]);
        part.data_bytes += p_.tensors[ti].nbytes;
        part.src_bytes += p_.tensors[ti].src_bytes;
      }
      part.file_bytes = gguf_file_size(part.meta, ts);
    }
  }

  const PlanOptions& opt_;
  Plan& p_;
  std::map<std::string, Src> by_name_;
  std::map<std::string, VisionSource> vision_;
  std::string name_;
  std::string prefix_;  // "language_model." when the checkpoint's text tensors carry it
};

}  // namespace

Plan make_plan(const PlanOptions& opt) {
  Plan p;
  Builder(opt, p).run();
  return p;
}

}  // namespace k3::convert
