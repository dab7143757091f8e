// The two BPE algorithms (conversion.md §5.4, §5.5):
//   MergeBpe — llama.cpp's: symbols start as the piece's bytes; repeatedly merge the adjacent pair
//              with the lowest merge index (leftmost on ties); final symbols looked up as tokens.
//   RankBpe  — tiktoken's: the whole piece if it is a token, else start from bytes and repeatedly
//              merge the adjacent pair whose concatenation has the lowest rank (leftmost on ties).
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/strmap.h"

namespace k3::tok {

class MergeBpe {
 public:
  // tokens: the GGUF token texts (byte-level strings); both vectors must outlive this object.
  // Throws k3::Error on a merge without a separating space.
  MergeBpe(const std::vector<std::string>& tokens, const std::vector<std::string>& merges);
  // Appends the tokens of one piece (raw bytes).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // Token id of an exact token text (last id wins for duplicate texts, as in llama.cpp), -1 if none.
  int32_t text_to_token(std::string_view text) const {
    int32_t id = text_id_.get(text);
    return id < n_tokens_ ? id : -1;
  }
  size_t n_merges() const { return pairs_.size(); }
  // Enables the whole-piece shortcut: a piece whose bytes are those of token t (raw[t], for the
  // ids with use[t]) is emitted as t once BPE has been seen to give exactly [t] for it. The result
  // is the same as running BPE; only the work is saved. raw must outlive this object.
  void enable_whole_piece_lookup(const std::vector<std::string>& raw, const std::vector<bool>& use);

 private:
  uint32_t symbol(std::string_view text);
  void emit(uint32_t sym, std::vector<int32_t>& out) const;
  void merge(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t n_tokens_;
  StrMap text_id_;                          // token texts and extra symbol texts -> symbol id
  std::deque<std::string> extra_;           // texts of symbols that are not tokens (ids n_tokens_..)
  std::vector<std::vector<int32_t>> extra_tokens_;  // what such a symbol is emitted as
  uint32_t byte_sym_[256];
  PairMap pairs_;
  std::vector<uint64_t> byte_pairs_;  // [b1 * 256 + b2] -> rank << 32 | result (rank -1: none)
  StrMap raw_id_;                                  // raw bytes -> token id (whole-piece shortcut)
  std::unique_ptr<std::atomic<uint8_t>[]> self_;   // per token: 0 unknown, 1 BPE gives [t], 2 not
};

class RankBpe {
 public:
  // ranked[i] = bytes of the token with rank (= id) i; must outlive this object.
  explicit RankBpe(const std::vector<std::string>& ranked);
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t rank(std::string_view bytes) const { return rank_.get(bytes); }

 private:
  StrMap rank_;
};

// The merge loop shared by both, exposed for tests: parts of a piece of n bytes, merged by
// pair(left, right) -> {rank, result symbol} (rank < 0: not mergeable).
struct BpePart {
  uint32_t start, end, sym;
};
struct BpePairRank {
  int32_t rank;
  uint32_t result;
};
template <class PairFn>
void bpe_merge(std::vector<BpePart>& parts, PairFn&& pair, bool force_heap = false);

}  // namespace k3::tok

#include "tokenizer/bpe_impl.h"
