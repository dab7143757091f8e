// UTF-8 helpers and the per-code-point Unicode properties the pre-tokenizers need, for the two
// Unicode versions in play: 15.1 (llama.cpp's tables) and 17.0 (the JavaScript engine js-tiktoken
// runs on). Tables are generated (unicode_tables.inc), not hand-written.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::tok {

std::string utf8_encode(uint32_t cp);
// Decodes the code point at s[i] and advances i; an ill-formed sequence yields U+FFFD and advances
// past its maximal subpart (Unicode §3.9 / WHATWG), so the result matches a replacing decoder.
uint32_t utf8_next(std::string_view s, size_t& i);
// Length of the well-formed prefix of s (s.size() if all valid).
size_t utf8_valid_prefix(std::string_view s);
// Replaces each maximal ill-formed subpart by U+FFFD (as TextDecoder, V8 and Python do).
std::string utf8_sanitize(std::string_view s);
// Number of trailing bytes of s that form an incomplete (but so far well-formed) sequence.
size_t utf8_incomplete_tail(std::string_view s);

enum class UnicodeVersion { v15_1, v17_0 };

namespace uprop {
enum : uint8_t {
  kOther = 0, kLu = 1, kLl = 2, kLt = 3, kLm = 4, kLo = 5, kM = 6, kN = 7,
  kGroupMask = 7, kWhiteSpace = 8, kHanScript = 16,
};
}

// Two-stage lookup table of props bytes (see uprop), 128-code-point blocks.
class UnicodeTable {
 public:
  uint8_t get(uint32_t cp) const { return cp > 0x10FFFF ? 0 : stage2_[stage1_[cp >> 7] * 128u + (cp & 127)]; }
  static const UnicodeTable& get(UnicodeVersion v);  // built on first use

 private:
  UnicodeTable(const uint32_t* runs, size_t n_runs);
  std::vector<uint16_t> stage1_;
  std::vector<uint8_t> stage2_;
};

inline uint8_t unicode_props(uint32_t cp, UnicodeVersion v) { return UnicodeTable::get(v).get(cp); }

// llama.cpp's Han rule (conversion.md §5.5): nine fixed code point ranges, assigned or not.
inline bool in_han_ranges(uint32_t cp) {
  if (cp < 0x3400) return false;
  if (cp <= 0x9FFF) return cp <= 0x4DBF || cp >= 0x4E00;
  if (cp < 0x20000) return cp >= 0xF900 && cp <= 0xFAFF;
  return cp <= 0x2A6DF || (cp >= 0x2A700 && cp <= 0x2EBEF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace k3::tok
