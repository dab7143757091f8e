#include "tokenizer/bpe.h"

#include "common/error.h"
#include "tokenizer/vocab.h"

namespace k3::tok {

MergeBpe::MergeBpe(const std::vector<std::string>& tokens, const std::vector<std::string>& merges)
    : n_tokens_(static_cast<int32_t>(tokens.size())), text_id_(tokens.size() + 256), pairs_(merges.size()) {
  for (int32_t id = 0; id < n_tokens_; ++id) text_id_.put(tokens[id], id);
  for (int b = 0; b < 256; ++b) byte_sym_[b] = symbol(bytes_to_token_text(std::string(1, static_cast<char>(b))));
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string_view m = merges[i];
    size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos)
      fail("tokenizer.ggml.merges[%zu]: '%s' is not two token texts separated by a space", i,
           std::string(m.substr(0, 80)).c_str());
    std::string_view l = m.substr(0, sp), r = m.substr(sp + 1);
    uint32_t ls = symbol(l), rs = symbol(r);
    uint32_t res = symbol(std::string(l) + std::string(r));
    pairs_.put(ls, rs, static_cast<int32_t>(i), res);
  }
  byte_pairs_.resize(65536);
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      const PairMap::Entry* e = pairs_.get(byte_sym_[a], byte_sym_[b]);
      byte_pairs_[a * 256 + b] = e ? (uint64_t(uint32_t(e->rank)) << 32 | e->result) : ~0ull;
    }
  // A symbol that is not a token is emitted as the tokens of the single bytes of its text.
  for (const std::string& t : extra_) {
    std::vector<int32_t> v;
    for (char c : t) {
      int32_t id = text_to_token(std::string_view(&c, 1));
      if (id >= 0) v.push_back(id);
    }
    extra_tokens_.push_back(std::move(v));
  }
}

uint32_t MergeBpe::symbol(std::string_view text) {
  int32_t id = text_id_.get(text);
  if (id >= 0) return static_cast<uint32_t>(id);
  extra_.emplace_back(text);
  id = n_tokens_ + static_cast<int32_t>(extra_.size()) - 1;
  text_id_.put(extra_.back(), id);
  return static_cast<uint32_t>(id);
}

void MergeBpe::emit(uint32_t sym, std::vector<int32_t>& out) const {
  if (static_cast<int32_t>(sym) < n_tokens_) {
    out.push_back(static_cast<int32_t>(sym));
    return;
  }
  const auto& v = extra_tokens_[sym - n_tokens_];
  out.insert(out.end(), v.begin(), v.end());
}

void MergeBpe::enable_whole_piece_lookup(const std::vector<std::string>& raw, const std::vector<bool>& use) {
  raw_id_ = StrMap(raw.size());
  for (size_t id = 0; id < raw.size() && id < static_cast<size_t>(n_tokens_); ++id)
    if (use[id] && raw[id].size() >= 2) raw_id_.put(raw[id], static_cast<int32_t>(id));
  self_ = std::make_unique<std::atomic<uint8_t>[]>(n_tokens_);
  for (int32_t i = 0; i < n_tokens_; ++i) self_[i].store(0, std::memory_order_relaxed);
}

void MergeBpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  const auto* s = reinterpret_cast<const uint8_t*>(piece.data());
  if (piece.size() == 1) {
    emit(byte_sym_[s[0]], out);
    return;
  }
  if (self_) {
    int32_t id = raw_id_.get(piece);
    if (id >= 0) {
      uint8_t st = self_[id].load(std::memory_order_relaxed);
      if (st == 1) {
        out.push_back(id);
        return;
      }
      if (st == 0) {
        size_t at = out.size();
        merge(piece, out);
        self_[id].store(out.size() == at + 1 && out[at] == id ? 1 : 2, std::memory_order_relaxed);
        return;
      }
    }
  }
  merge(piece, out);
}

void MergeBpe::merge(std::string_view piece, std::vector<int32_t>& out) const {
  const auto* s = reinterpret_cast<const uint8_t*>(piece.data());
  thread_local std::vector<BpePart> parts;
  parts.resize(piece.size());
  for (uint32_t i = 0; i < piece.size(); ++i) parts[i] = {i, i + 1, byte_sym_[s[i]]};
  bpe_merge(parts, [this, s](const BpePart& l, const BpePart& r) -> BpePairRank {
    if (l.end - l.start == 1 && r.end - r.start == 1) {  // two single bytes: the dense table
      uint64_t v = byte_pairs_[s[l.start] * 256u + s[r.start]];
      return v == ~0ull ? BpePairRank{-1, 0} : BpePairRank{static_cast<int32_t>(v >> 32), static_cast<uint32_t>(v)};
    }
    const PairMap::Entry* e = pairs_.get(l.sym, r.sym);
    return e ? BpePairRank{e->rank, e->result} : BpePairRank{-1, 0};
  });
  for (const BpePart& p : parts) emit(p.sym, out);
  if (parts.capacity() > (size_t{1} << 16)) std::vector<BpePart>().swap(parts);  // a huge piece's scratch
}

RankBpe::RankBpe(const std::vector<std::string>& ranked) : rank_(ranked.size()) {
  for (size_t r = 0; r < ranked.size(); ++r) rank_.put(ranked[r], static_cast<int32_t>(r));
}

void RankBpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t whole = rank_.get(piece);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  thread_local std::vector<BpePart> parts;
  parts.resize(piece.size());
  for (uint32_t i = 0; i < piece.size(); ++i) parts[i] = {i, i + 1, 0};
  const char* base = piece.data();
  bpe_merge(parts, [this, base](const BpePart& l, const BpePart& r) -> BpePairRank {
    return {rank_.get(base + l.start, r.end - l.start), 0};
  });
  for (const BpePart& p : parts) {
    int32_t id = rank_.get(base + p.start, p.end - p.start);
    if (id >= 0) out.push_back(id);  // only a byte missing from the ranks has none
  }
  if (parts.capacity() > (size_t{1} << 16)) std::vector<BpePart>().swap(parts);  // a huge piece's scratch
}

}  // namespace k3::tok
