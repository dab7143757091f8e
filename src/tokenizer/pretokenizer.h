// Pre-tokenizers: split text into the pieces that BPE encodes independently (conversion.md §5.5).
//
// Each split pattern runs in PCRE2 (JIT) over a class-mapped copy of the text: ASCII stays as it
// is, every other code point becomes one byte 0x80+class, where the class comes from generated
// Unicode tables of the version the reference uses (15.1 for llama.cpp, 17.0 for js-tiktoken).
// The patterns are the reference regexes with \p{..}/\s written as classes over those bytes, so
// the result does not depend on PCRE2's own Unicode version (10.42 has 14.0).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace k3::tok {

enum class PreType {
  kimi_k2,        // llama.cpp's kimi-k2 splitter (the simpler regex of §5.5), Unicode 15.1
  kimi_k2_regex,  // the official Kimi regex (case structure, \p{M} as letters, Script=Han), Unicode 15.1
  cl100k_base,    // tiktoken's cl100k_base pattern as js-tiktoken runs it (JS \s, Unicode 17.0)
  o200k_base,     // tiktoken's o200k_base pattern, likewise
  gpt2,           // the GPT-2 pattern (llama.cpp's default when tokenizer.ggml.pre is absent), Unicode 15.1
};

// "kimi-k2", "kimi-k2-regex", "cl100k_base", "o200k_base", "default"/"gpt2"; throws k3::Error
// naming the supported values otherwise.
PreType pre_type_from_name(std::string_view name);
const char* pre_type_name(PreType t);

struct Span {
  uint32_t begin, end;  // byte offsets into the split text
};

class PreTokenizer {
 public:
  explicit PreTokenizer(PreType type);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  PreType type() const { return type_; }
  // Appends the pieces of `text` (well-formed UTF-8, < 4 GiB) to out, in order. Text that no
  // alternative matches is skipped, as regex find-all does (the built-in patterns cover all text).
  void split(std::string_view text, std::vector<Span>& out) const;
  // The PCRE2 pattern over class bytes (for tests and diagnostics).
  const std::string& pattern() const { return pattern_; }
  // The class byte a non-ASCII code point maps to.
  uint8_t class_of(uint32_t cp) const;

 private:
  void run(const uint8_t* subject, size_t n, const uint32_t* offsets, std::vector<Span>& out) const;
  PreType type_;
  const UnicodeTable* table_;
  uint8_t lut_[32];  // props -> class byte
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace k3::tok
