#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace k3::tok {

namespace {

// Byte-level text -> bytes; a character outside the byte map is kept as its UTF-8 (llama.cpp
// keeps such text visible too), so loading never fails on an odd token.
std::string lenient_token_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t at = i;
    uint32_t cp = utf8_next(text, i);
    bool mapped = (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF) ||
                  (cp >= 0x100 && cp <= 0x143);
    if (mapped)
      out += token_text_to_bytes(text.substr(at, i - at));
    else
      out.append(text.data() + at, i - at);
  }
  return out;
}

// Special-token texts, matched at every position with a byte trie.
class SpecialMatcher {
 public:
  void add(std::string_view text, int32_t id) {
    if (text.empty()) return;
    int32_t node = 0;
    for (unsigned char c : text) {
      auto& ch = nodes_[node].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), c, [](const auto& e, unsigned char v) { return e.first < v; });
      if (it != ch.end() && it->first == c) {
        node = it->second;
      } else {
        int32_t fresh = static_cast<int32_t>(nodes_.size());
        ch.insert(it, {c, fresh});
        nodes_.emplace_back();
        node = fresh;
      }
    }
    if (nodes_[node].id < 0 || id < nodes_[node].id) nodes_[node].id = id;
    first_[static_cast<unsigned char>(text[0]) >> 6] |= 1ull << (static_cast<unsigned char>(text[0]) & 63);
  }
  bool empty() const { return nodes_.size() == 1; }

  struct Occ {
    uint32_t pos, len;
    int32_t id;
  };
  void find_all(std::string_view s, std::vector<Occ>& out) const {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    for (size_t i = 0; i < s.size(); ++i) {
      if (!((first_[p[i] >> 6] >> (p[i] & 63)) & 1)) continue;
      int32_t node = 0;
      for (size_t k = i; k < s.size(); ++k) {
        const auto& ch = nodes_[node].children;
        auto it = std::lower_bound(ch.begin(), ch.end(), p[k], [](const auto& e, unsigned char v) { return e.first < v; });
        if (it == ch.end() || it->first != p[k]) break;
        node = it->second;
        if (nodes_[node].id >= 0) out.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(k + 1 - i), nodes_[node].id});
      }
    }
  }

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<unsigned char, int32_t>> children;
  };
  std::vector<Node> nodes_{1};
  uint64_t first_[4] = {0, 0, 0, 0};
};

class BpeTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const override;
  const std::string& piece(int32_t id) const override { return pieces_[check(id)]; }
  int32_t n_vocab() const override { return static_cast<int32_t>(texts_.size()); }
  bool is_special(int32_t id) const override {
    int32_t t = token_type(id);
    return t == CONTROL || t == USER_DEFINED;
  }
  bool is_eog(int32_t id) const override { return std::find(eog_.begin(), eog_.end(), id) != eog_.end(); }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  int32_t token_id(std::string_view text) const override;
  int32_t token_type(int32_t id) const override { return types_[check(id)]; }
  const std::string& token_text(int32_t id) const override { return texts_[check(id)]; }
  int32_t eot() const override { return eot_; }
  int32_t pad() const override { return pad_; }
  bool add_bos() const override { return add_bos_; }
  const std::vector<int32_t>& eog_ids() const override { return eog_; }
  const char* pre_name() const override { return pre_type_name(pre_->type()); }

  // Fills everything from texts_/types_ (and ranked_ for rank BPE).
  void finish(PreType pre, const std::vector<std::string>* merges);

  std::vector<std::string> texts_;   // as stored in the vocabulary
  std::vector<std::string> pieces_;  // raw bytes
  std::vector<int32_t> types_;
  std::vector<std::string> ranked_;  // rank BPE only
  std::vector<std::string> merges_;  // merge BPE only
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, pad_ = -1;
  bool add_bos_ = false;

 private:
  size_t check(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= texts_.size())
      fail("token id %d is out of range [0, %zu)", id, texts_.size());
    return static_cast<size_t>(id);
  }
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;

  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<MergeBpe> merge_bpe_;
  std::unique_ptr<RankBpe> rank_bpe_;
  SpecialMatcher always_, with_special_;  // USER_DEFINED; plus CONTROL/UNKNOWN
  StrMap text_id_;
  std::vector<int32_t> eog_;
};

void BpeTokenizer::finish(PreType pre, const std::vector<std::string>* merges) {
  const size_t n = texts_.size();
  pieces_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    int32_t t = types_[id];
    pieces_[id] = (t == NORMAL || t == BYTE) ? lenient_token_bytes(texts_[id]) : texts_[id];
    if (t == USER_DEFINED) always_.add(texts_[id], static_cast<int32_t>(id));
    if (t == USER_DEFINED || t == CONTROL || t == UNKNOWN) with_special_.add(texts_[id], static_cast<int32_t>(id));
  }
  text_id_ = StrMap(n);
  for (size_t id = 0; id < n; ++id) text_id_.put(texts_[id], static_cast<int32_t>(id));
  pre_ = std::make_unique<PreTokenizer>(pre);
  if (merges) {
    merge_bpe_ = std::make_unique<MergeBpe>(texts_, *merges);
    std::vector<bool> use(n);
    for (size_t id = 0; id < n; ++id) use[id] = types_[id] == NORMAL || types_[id] == BYTE;
    merge_bpe_->enable_whole_piece_lookup(pieces_, use);
  }
  else
    rank_bpe_ = std::make_unique<RankBpe>(ranked_);
  // End of generation (chat.md §4): eos, eot, eom, and the tokens named [EOS], [EOT], [PAD].
  auto by_name = [&](std::string_view name) {
    int32_t id = text_id_.get(name);
    return (id >= 0 && types_[id] != NORMAL) ? id : -1;
  };
  if (eot_ < 0) eot_ = by_name("[EOT]");
  for (int32_t id : {eos_, eot_, eom_, by_name("[EOS]"), by_name("[EOT]"), by_name("[PAD]")})
    if (id >= 0 && std::find(eog_.begin(), eog_.end(), id) == eog_.end()) eog_.push_back(id);
}

int32_t BpeTokenizer::token_id(std::string_view text) const { return text_id_.get(text); }

void BpeTokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<Span> spans;
  spans.clear();
  pre_->split(text, spans);
  for (const Span& s : spans) {
    std::string_view p = text.substr(s.begin, s.end - s.begin);
    if (merge_bpe_)
      merge_bpe_->encode(p, out);
    else
      rank_bpe_->encode(p, out);
  }
  // Scratch left by a very long text is given back: a server's thread would keep it for good.
  if (spans.capacity() > (size_t{1} << 17)) std::vector<Span>().swap(spans);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::string clean;
  if (utf8_valid_prefix(text) != text.size()) {
    clean = utf8_sanitize(text);
    text = clean;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const SpecialMatcher& m = parse_special ? with_special_ : always_;
  std::vector<SpecialMatcher::Occ> occ;
  if (!m.empty()) m.find_all(text, occ);
  if (occ.empty()) {
    encode_fragment(text, out);
    return out;
  }
  // llama.cpp's order: each special text in turn, longest first, takes its leftmost
  // non-overlapping occurrences in the text not yet taken by a longer one.
  std::sort(occ.begin(), occ.end(), [](const auto& a, const auto& b) {
    if (a.len != b.len) return a.len > b.len;
    if (a.id != b.id) return a.id < b.id;
    return a.pos < b.pos;
  });
  std::vector<bool> taken(text.size(), false);
  std::vector<SpecialMatcher::Occ> accepted;
  uint32_t last_end = 0;
  int32_t last_id = -1;
  for (const auto& o : occ) {
    if (o.id != last_id) last_id = o.id, last_end = 0;
    if (o.pos < last_end) continue;
    bool free = true;
    for (uint32_t k = o.pos; k < o.pos + o.len && free; ++k) free = !taken[k];
    if (!free) continue;
    for (uint32_t k = o.pos; k < o.pos + o.len; ++k) taken[k] = true;
    accepted.push_back(o);
    last_end = o.pos + o.len;
  }
  std::sort(accepted.begin(), accepted.end(), [](const auto& a, const auto& b) { return a.pos < b.pos; });
  size_t at = 0;
  for (const auto& o : accepted) {
    if (o.pos > at) encode_fragment(text.substr(at, o.pos - at), out);
    out.push_back(o.id);
    at = o.pos + o.len;
  }
  if (at < text.size()) encode_fragment(text.substr(at), out);
  return out;
}

const gguf::Array& array_of(const gguf::Metadata& meta, const char* key, gguf::ValueType elem, bool int_ok = false) {
  const gguf::Array& a = meta.get_array(key);
  bool ok = a.elem == elem || (int_ok && a.elem == gguf::ValueType::UINT32);
  if (!ok)
    fail("%s%skey '%s' is an array of %s, expected %s", meta.context.c_str(), meta.context.empty() ? "" : ": ", key,
         gguf::value_type_name(a.elem), gguf::value_type_name(elem));
  return a;
}

}  // namespace

bool Tokenizer::hidden(int32_t id) const {
  int32_t t = token_type(id);
  return t == CONTROL || t == UNKNOWN || t == UNUSED;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    const std::string& p = piece(id);
    if (render_special || !hidden(id)) out += p;
  }
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::from_metadata(const gguf::Metadata& meta) { return from_metadata(meta, {}); }

std::unique_ptr<Tokenizer> Tokenizer::from_metadata(const gguf::Metadata& meta, const Options& opt) {
  const std::string ctx = meta.context.empty() ? "" : meta.context + ": ";
  const std::string& model = meta.get_str("tokenizer.ggml.model");
  if (model != "gpt2")
    fail("%stokenizer.ggml.model '%s' is not supported (k3 reads gpt2 byte-level BPE vocabularies)", ctx.c_str(),
         model.c_str());
  auto tok = std::make_unique<BpeTokenizer>();
  tok->texts_ = std::get<std::vector<std::string>>(array_of(meta, "tokenizer.ggml.tokens", gguf::ValueType::STRING).data);
  const size_t n = tok->texts_.size();
  if (n == 0) fail("%stokenizer.ggml.tokens is empty", ctx.c_str());
  if (n > 0x7FFFFFFF) fail("%stokenizer.ggml.tokens has too many entries", ctx.c_str());
  tok->types_.assign(n, NORMAL);
  if (meta.has("tokenizer.ggml.token_type")) {
    const gguf::Array& a = array_of(meta, "tokenizer.ggml.token_type", gguf::ValueType::INT32, true);
    if (a.size() != n)
      fail("%stokenizer.ggml.token_type has %zu entries, tokenizer.ggml.tokens %zu", ctx.c_str(), a.size(), n);
    for (size_t i = 0; i < n; ++i) {
      int64_t t = a.elem == gguf::ValueType::INT32 ? std::get<std::vector<int32_t>>(a.data)[i]
                                                   : std::get<std::vector<uint32_t>>(a.data)[i];
      if (t < NORMAL || t > BYTE) fail("%stokenizer.ggml.token_type[%zu] = %lld is not a token type (1..6)", ctx.c_str(), i, static_cast<long long>(t));
      tok->types_[i] = static_cast<int32_t>(t);
    }
  }
  if (meta.has("tokenizer.ggml.merges"))
    tok->merges_ = std::get<std::vector<std::string>>(array_of(meta, "tokenizer.ggml.merges", gguf::ValueType::STRING).data);
  auto id_key = [&](const char* key) -> int32_t {
    if (!meta.has(key)) return -1;
    uint32_t id = meta.get_u32(key);
    if (id >= n) fail("%s%s = %u is out of range (the vocabulary has %zu tokens)", ctx.c_str(), key, id, n);
    return static_cast<int32_t>(id);
  };
  tok->bos_ = id_key("tokenizer.ggml.bos_token_id");
  tok->eos_ = id_key("tokenizer.ggml.eos_token_id");
  tok->eot_ = id_key("tokenizer.ggml.eot_token_id");
  tok->eom_ = id_key("tokenizer.ggml.eom_token_id");
  tok->pad_ = id_key("tokenizer.ggml.padding_token_id");
  tok->add_bos_ = meta.get_bool_or("tokenizer.ggml.add_bos_token", false);
  std::string pre = opt.pre;
  if (pre.empty()) pre = meta.get_str_opt("tokenizer.ggml.pre").value_or("default");
  PreType type;
  try {
    type = pre_type_from_name(pre);
  } catch (const Error& e) {
    fail("%stokenizer.ggml.pre: %s", ctx.c_str(), e.what());
  }
  try {
    tok->finish(type, &tok->merges_);
  } catch (const Error& e) {
    fail("%s%s", ctx.c_str(), e.what());
  }
  return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path, const std::string& config_path,
                                                const Options& opt) {
  char magic[4] = {0, 0, 0, 0};
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
      if (!config_path.empty()) fail("%s: --config applies to a tiktoken.model, not to a GGUF file", path.c_str());
      return from_metadata(gguf::Model::open(path).meta(), opt);
    }
  } else {
    fail("%s: cannot open file", path.c_str());
  }
  VocabSpec spec = vocab_from_tiktoken(path, config_path);
  if (!opt.pre.empty()) spec.pre = opt.pre;
  gguf::Metadata meta;
  meta.context = path;
  write_vocab(spec, meta);
  return from_metadata(meta);
}

std::unique_ptr<Tokenizer> Tokenizer::from_ranks(std::vector<std::string> ranked, std::vector<SpecialToken> specials,
                                                 std::string_view pre) {
  auto tok = std::make_unique<BpeTokenizer>();
  const int32_t n_ranked = static_cast<int32_t>(ranked.size());
  int32_t n = n_ranked;
  for (const auto& s : specials) {
    if (s.id < n_ranked) fail("special token '%s' has id %d inside the ranked vocabulary", s.text.c_str(), s.id);
    n = std::max(n, s.id + 1);
  }
  tok->texts_.resize(n);
  tok->types_.assign(n, UNUSED);
  for (int32_t r = 0; r < n_ranked; ++r) {
    tok->texts_[r] = bytes_to_token_text(ranked[r]);
    tok->types_[r] = NORMAL;
  }
  for (const auto& s : specials) {
    tok->texts_[s.id] = s.text;
    tok->types_[s.id] = CONTROL;
  }
  for (int32_t id = n_ranked; id < n; ++id)
    if (tok->types_[id] == UNUSED) tok->texts_[id] = strprintf("[PAD%d]", id);
  tok->ranked_ = std::move(ranked);
  tok->finish(pre_type_from_name(pre), nullptr);
  return tok;
}

std::string StreamDecoder::push(int32_t id) {
  const std::string& p = tok_.piece(id);
  if (!render_special_ && tok_.hidden(id)) return {};
  pending_ += p;
  size_t keep = utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace k3::tok
