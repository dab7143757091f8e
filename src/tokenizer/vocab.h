// Building a GGUF vocabulary (the tokenizer.* keys) from tiktoken-style ranked byte sequences
// (conversion.md §5): used by the converter (real tiktoken.model) and by `k3 make-tiny`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace k3::tok {

// GPT-2 byte-level mapping: raw bytes -> printable UTF-8 token string, and back.
std::string bytes_to_token_text(std::string_view bytes);
std::string token_text_to_bytes(std::string_view text);  // throws on a character outside the map

struct SpecialToken {
  int32_t id;
  std::string text;
};

struct VocabSpec {
  std::vector<std::string> ranked;      // byte sequences; index = rank = token id
  std::vector<SpecialToken> specials;   // ids >= ranked.size(); unnamed ids become <|reserved_token_N|>
  int32_t n_vocab = 0;                  // total ids (ranked + specials + reserved); 0: up to the last special
  std::string pre = "kimi-k2";
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string chat_template;            // empty: not written
  std::optional<bool> add_bos, add_eos; // tokenizer.ggml.add_{bos,eos}_token, written when set
};

// Writes tokenizer.ggml.{model,pre,tokens,token_type,merges,bos/eos/padding_token_id} and
// tokenizer.chat_template into meta. Merges are reconstructed from the ranks (conversion.md §5.4).
// Throws k3::Error on an inconsistent spec (duplicate bytes or ids, ids out of range).
void write_vocab(const VocabSpec& spec, gguf::Metadata& meta);

// Parses a tiktoken.model file (base64 token, space, rank per line); errors name file and line.
// Ranks must be exactly 0..N-1 (any line order), each token's bytes distinct and non-empty.
std::vector<std::string> read_tiktoken_ranks(const std::string& path);
// The same for file contents already in memory; `name` stands in for the path in messages.
std::vector<std::string> parse_tiktoken_ranks(std::string_view contents, const std::string& name);

// The merges of conversion.md §5.4 as byte pairs, in merge (= rank) order: for every ranked token
// of >= 2 bytes, rank-limited BPE of its bytes; a token that does not end in exactly two parts gets
// no merge and is counted in *unreachable (it could never be produced by merge-list BPE).
std::vector<std::pair<std::string, std::string>> merges_from_ranks(const std::vector<std::string>& ranked,
                                                                   size_t* unreachable = nullptr);

// A tiktoken.model plus (optionally) a Hugging Face tokenizer_config.json: added_tokens_decoder
// (id -> content) become the specials, bos/eos/pad_token name them, chat_template and
// add_bos_token/add_eos_token are copied. n_vocab 0: up to the last special id.
VocabSpec vocab_from_tiktoken(const std::string& tiktoken_path, const std::string& config_path = "",
                              int32_t n_vocab = 0);
// Only the tokenizer_config.json part, applied to a spec whose `ranked` is filled.
void apply_tokenizer_config(VocabSpec& spec, const std::string& config_path);

}  // namespace k3::tok
