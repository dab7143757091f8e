// Building a GGUF vocabulary (the tokenizer.* keys) from tiktoken-style ranked byte sequences
// (conversion.md §5): used by the converter (real tiktoken.model) and by `k3 make-tiny`.
#pragma once
#include <cstdint>
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
  int32_t n_vocab = 0;                  // total ids (ranked + specials + reserved)
  std::string pre = "kimi-k2";
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string chat_template;            // empty: not written
};

// Writes tokenizer.ggml.{model,pre,tokens,token_type,merges,bos/eos/padding_token_id} and
// tokenizer.chat_template into meta. Merges are reconstructed from the ranks (conversion.md §5.4).
void write_vocab(const VocabSpec& spec, gguf::Metadata& meta);

// Parses a tiktoken.model file (base64 token, space, rank per line); errors name file and line.
std::vector<std::string> read_tiktoken_ranks(const std::string& path);

}  // namespace k3::tok
