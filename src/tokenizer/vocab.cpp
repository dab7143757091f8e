// GGUF vocabulary from tiktoken ranks (conversion.md §5.1–5.4, §5.6, §5.7).
#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/base64.h"
#include "common/error.h"
#include "tokenizer/strmap.h"
#include "tokenizer/unicode.h"

namespace k3::tok {

namespace {

// §5.2: bytes 0x21–0x7E, 0xA1–0xAC, 0xAE–0xFF map to themselves, the other 68 to U+0100.. in order.
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_text;
  std::array<int16_t, 0x144> from_cp{};  // code point -> byte, -1 if not in the map
  ByteMap() {
    from_cp.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = keep ? b : next++;
      to_text[b] = utf8_encode(to_cp[b]);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Standard base64 with padding; false on any malformation.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  if (in.back() == '=') pad = (in[in.size() - 2] == '=') ? 2 : 1;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    for (int k = 0; k < 4; ++k) {
      bool last_group = i + 4 == in.size();
      if (last_group && k >= 4 - static_cast<int>(pad)) {
        if (in[i + k] != '=') return false;
        v[k] = 0;
      } else if ((v[k] = base64_value(in[i + k])) < 0) {
        return false;
      }
    }
    uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<char>(w >> 16));
    if (i + 4 < in.size() || pad < 2) out.push_back(static_cast<char>((w >> 8) & 0xFF));
    if (i + 4 < in.size() || pad < 1) out.push_back(static_cast<char>(w & 0xFF));
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("%s: cannot open file", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("%s: read error", path.c_str());
  return ss.str();
}

std::string shown(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 60)) {
    if (c >= 0x20 && c < 0x7F && c != '\\')
      out += static_cast<char>(c);
    else
      out += strprintf("\\x%02x", c);
  }
  if (s.size() > 60) out += "...";
  return out;
}

}  // namespace

std::string bytes_to_token_text(std::string_view bytes) {
  const ByteMap& m = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += m.to_text[b];
  return out;
}

std::string token_text_to_bytes(std::string_view text) {
  const ByteMap& m = byte_map();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t at = i;
    uint32_t cp = utf8_next(text, i);
    if (cp >= m.from_cp.size() || m.from_cp[cp] < 0)
      fail("token text '%s': character U+%04X at byte %zu is not in the byte-level map", shown(text).c_str(), cp,
           at);
    out.push_back(static_cast<char>(m.from_cp[cp]));
  }
  return out;
}

std::vector<std::string> parse_tiktoken_ranks(std::string_view contents, const std::string& name) {
  // Ranks are 0..N-1 for N entries, so a rank >= the number of lines is a gap (checked before
  // anything is sized by it).
  const size_t max_entries = static_cast<size_t>(std::count(contents.begin(), contents.end(), '\n')) + 1;
  std::vector<size_t> line_of;  // line number per rank, 0 = not seen
  std::vector<std::pair<int64_t, std::string>> entries;
  size_t line_no = 0, pos = 0;
  while (pos < contents.size()) {
    size_t end = contents.find('\n', pos);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view line = contents.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos)
      fail("%s:%zu: malformed line '%s': expected '<base64 token> <rank>'", name.c_str(), line_no,
           shown(line).c_str());
    std::string_view b64 = line.substr(0, sp), num = line.substr(sp + 1);
    if (num.empty() || num.size() > 10 || !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fail("%s:%zu: malformed rank '%s': expected a decimal number", name.c_str(), line_no, shown(num).c_str());
    int64_t rank = std::stoll(std::string(num));
    if (rank > std::numeric_limits<int32_t>::max() - 1)
      fail("%s:%zu: rank %lld is too large", name.c_str(), line_no, static_cast<long long>(rank));
    if (static_cast<size_t>(rank) >= max_entries)
      fail("%s:%zu: rank %lld leaves a gap: the file has at most %zu entries, so ranks must be below that",
           name.c_str(), line_no, static_cast<long long>(rank), max_entries);
    std::string bytes;
    if (!base64_decode(b64, bytes))
      fail("%s:%zu: malformed token '%s': not valid base64", name.c_str(), line_no, shown(b64).c_str());
    if (bytes.empty()) fail("%s:%zu: empty token", name.c_str(), line_no);
    if (static_cast<size_t>(rank) >= line_of.size()) line_of.resize(static_cast<size_t>(rank) + 1, 0);
    if (line_of[rank] != 0)
      fail("%s:%zu: duplicate rank %lld (first on line %zu)", name.c_str(), line_no, static_cast<long long>(rank),
           line_of[rank]);
    line_of[rank] = line_no;
    entries.emplace_back(rank, std::move(bytes));
  }
  if (entries.empty()) fail("%s: no tokens", name.c_str());
  std::vector<std::string> by_rank(line_of.size());
  for (size_t r = 0; r < line_of.size(); ++r)
    if (line_of[r] == 0)
      fail("%s: rank %zu is missing (ranks must be 0..%zu without gaps; rank %zu is on line %zu)", name.c_str(), r,
           line_of.size() - 1, line_of.size() - 1, line_of.back());
  for (auto& [rank, bytes] : entries) by_rank[rank] = std::move(bytes);
  StrMap seen(by_rank.size());
  for (size_t r = 0; r < by_rank.size(); ++r) {
    int32_t prev = seen.get(by_rank[r]);
    if (prev >= 0)
      fail("%s:%zu: token '%s' (rank %zu) duplicates rank %d on line %zu", name.c_str(), line_of[r],
           shown(by_rank[r]).c_str(), r, prev, line_of[prev]);
    seen.put(by_rank[r], static_cast<int32_t>(r));
  }
  return by_rank;
}

std::vector<std::string> read_tiktoken_ranks(const std::string& path) {
  return parse_tiktoken_ranks(read_file(path), path);
}

std::vector<std::pair<std::string, std::string>> merges_from_ranks(const std::vector<std::string>& ranked,
                                                                   size_t* unreachable) {
  StrMap rank_of(ranked.size());
  for (size_t r = 0; r < ranked.size(); ++r) rank_of.put(ranked[r], static_cast<int32_t>(r));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(ranked.size());
  size_t missing = 0;
  std::vector<uint32_t> cut;  // part boundaries
  for (size_t r = 0; r < ranked.size(); ++r) {
    const std::string& t = ranked[r];
    if (t.size() < 2) continue;
    cut.resize(t.size() + 1);
    for (size_t i = 0; i <= t.size(); ++i) cut[i] = static_cast<uint32_t>(i);
    while (cut.size() > 2) {
      int32_t best = -1;
      size_t at = 0;
      for (size_t i = 0; i + 2 < cut.size(); ++i) {
        int32_t q = rank_of.get(t.data() + cut[i], cut[i + 2] - cut[i]);
        if (q >= 0 && static_cast<size_t>(q) < r && (best < 0 || q < best)) best = q, at = i;
      }
      if (best < 0) break;
      cut.erase(cut.begin() + at + 1);
    }
    if (cut.size() == 3)
      merges.emplace_back(t.substr(0, cut[1]), t.substr(cut[1]));
    else
      ++missing;
  }
  if (unreachable) *unreachable = missing;
  return merges;
}

void write_vocab(const VocabSpec& spec, gguf::Metadata& meta) {
  const int32_t n_ranked = static_cast<int32_t>(spec.ranked.size());
  int32_t n_vocab = spec.n_vocab;
  if (n_vocab == 0) {
    n_vocab = n_ranked;
    for (const auto& s : spec.specials) n_vocab = std::max(n_vocab, s.id + 1);
  }
  if (n_vocab < n_ranked) fail("vocabulary: n_vocab %d is smaller than the %d ranked tokens", n_vocab, n_ranked);
  {
    StrMap seen(spec.ranked.size());
    for (int32_t r = 0; r < n_ranked; ++r) {
      if (spec.ranked[r].empty()) fail("vocabulary: ranked token %d is empty", r);
      int32_t prev = seen.get(spec.ranked[r]);
      if (prev >= 0) fail("vocabulary: ranked tokens %d and %d have the same bytes '%s'", prev, r, shown(spec.ranked[r]).c_str());
      seen.put(spec.ranked[r], r);
    }
  }
  std::vector<std::string> tokens(n_vocab);
  std::vector<int32_t> types(n_vocab, 3);  // CONTROL unless ranked
  std::vector<bool> named(n_vocab, false);
  for (int32_t r = 0; r < n_ranked; ++r) {
    tokens[r] = bytes_to_token_text(spec.ranked[r]);
    types[r] = 1;  // NORMAL
  }
  std::map<std::string, int32_t> special_text;
  for (const auto& s : spec.specials) {
    if (s.id < n_ranked || s.id >= n_vocab)
      fail("vocabulary: special token '%s' has id %d outside [%d, %d)", shown(s.text).c_str(), s.id, n_ranked, n_vocab);
    if (named[s.id]) fail("vocabulary: special id %d is named twice ('%s', '%s')", s.id, tokens[s.id].c_str(), s.text.c_str());
    if (s.text.empty()) fail("vocabulary: special token %d has an empty name", s.id);
    auto [it, fresh] = special_text.emplace(s.text, s.id);
    if (!fresh) fail("vocabulary: special tokens %d and %d have the same text '%s'", it->second, s.id, shown(s.text).c_str());
    named[s.id] = true;
    tokens[s.id] = s.text;
  }
  for (int32_t id = n_ranked; id < n_vocab; ++id)
    if (!named[id]) tokens[id] = strprintf("<|reserved_token_%d|>", id);
  for (int32_t id : {spec.bos_id, spec.eos_id, spec.pad_id})
    if (id < -1 || id >= n_vocab) fail("vocabulary: special id %d outside [0, %d)", id, n_vocab);

  std::vector<std::string> merges;
  for (auto& [l, r] : merges_from_ranks(spec.ranked)) merges.push_back(bytes_to_token_text(l) + " " + bytes_to_token_text(r));

  auto str_array = [](std::vector<std::string> v) {
    gguf::Array a;
    a.elem = gguf::ValueType::STRING;
    a.data = std::move(v);
    return gguf::Value::array(std::move(a));
  };
  meta.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  meta.set("tokenizer.ggml.pre", gguf::Value::str(spec.pre));
  meta.set("tokenizer.ggml.tokens", str_array(std::move(tokens)));
  gguf::Array ta;
  ta.elem = gguf::ValueType::INT32;
  ta.data = std::move(types);
  meta.set("tokenizer.ggml.token_type", gguf::Value::array(std::move(ta)));
  meta.set("tokenizer.ggml.merges", str_array(std::move(merges)));
  if (spec.bos_id >= 0) meta.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(spec.bos_id));
  if (spec.eos_id >= 0) meta.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(spec.eos_id));
  if (spec.pad_id >= 0) meta.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(spec.pad_id));
  if (spec.add_bos) meta.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(*spec.add_bos));
  if (spec.add_eos) meta.set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(*spec.add_eos));
  if (!spec.chat_template.empty()) meta.set("tokenizer.chat_template", gguf::Value::str(spec.chat_template));
}

void apply_tokenizer_config(VocabSpec& spec, const std::string& config_path) {
  using nlohmann::json;
  json cfg;
  try {
    cfg = json::parse(read_file(config_path));
  } catch (const json::exception& e) {
    fail("%s: invalid JSON: %s", config_path.c_str(), e.what());
  }
  if (!cfg.is_object()) fail("%s: expected a JSON object", config_path.c_str());
  const int32_t n_ranked = static_cast<int32_t>(spec.ranked.size());
  if (cfg.contains("added_tokens_decoder")) {
    const json& dec = cfg["added_tokens_decoder"];
    if (!dec.is_object()) fail("%s: added_tokens_decoder must be an object", config_path.c_str());
    for (auto it = dec.begin(); it != dec.end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
        fail("%s: added_tokens_decoder key '%s' is not a token id", config_path.c_str(), key.c_str());
      const json& v = it.value();
      if (!v.is_object() || !v.contains("content") || !v["content"].is_string())
        fail("%s: added_tokens_decoder[%s] has no string 'content'", config_path.c_str(), key.c_str());
      if (id < n_ranked) {
        // An added token that re-states a ranked token (same bytes) is allowed; anything else is not.
        if (v["content"].get<std::string>() == spec.ranked[id]) continue;
        fail("%s: added token %ld '%s' collides with ranked token %ld", config_path.c_str(), id,
             v["content"].get<std::string>().c_str(), id);
      }
      spec.specials.push_back({static_cast<int32_t>(id), v["content"].get<std::string>()});
    }
  }
  auto token_name = [&](const char* field) -> std::string {
    if (!cfg.contains(field) || cfg[field].is_null()) return "";
    const json& v = cfg[field];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    fail("%s: %s must be a string or an object with 'content'", config_path.c_str(), field);
  };
  auto id_of = [&](const char* field) -> int32_t {
    std::string name = token_name(field);
    if (name.empty()) return -1;
    for (const auto& s : spec.specials)
      if (s.text == name) return s.id;
    fail("%s: %s '%s' is not an added token", config_path.c_str(), field, name.c_str());
  };
  if (int32_t id = id_of("bos_token"); id >= 0) spec.bos_id = id;
  if (int32_t id = id_of("eos_token"); id >= 0) spec.eos_id = id;
  if (int32_t id = id_of("pad_token"); id >= 0) spec.pad_id = id;
  for (const char* f : {"add_bos_token", "add_eos_token"}) {
    if (!cfg.contains(f) || cfg[f].is_null()) continue;
    if (!cfg[f].is_boolean()) fail("%s: %s must be a boolean", config_path.c_str(), f);
    (f[4] == 'b' ? spec.add_bos : spec.add_eos) = cfg[f].get<bool>();
  }
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      spec.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": ..., "template": ...}]: the default one
      for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          spec.chat_template = e["template"].get<std::string>();
    } else {
      fail("%s: chat_template must be a string", config_path.c_str());
    }
  }
}

VocabSpec vocab_from_tiktoken(const std::string& tiktoken_path, const std::string& config_path, int32_t n_vocab) {
  VocabSpec spec;
  spec.ranked = read_tiktoken_ranks(tiktoken_path);
  if (!config_path.empty()) apply_tokenizer_config(spec, config_path);
  std::sort(spec.specials.begin(), spec.specials.end(), [](auto& a, auto& b) { return a.id < b.id; });
  spec.n_vocab = n_vocab;
  return spec;
}

}  // namespace k3::tok
