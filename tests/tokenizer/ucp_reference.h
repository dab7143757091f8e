// Independent references for the pre-tokenizers (tests and benchmarks only):
//  * the split patterns written as ordinary PCRE2 UTF+UCP regexes over real \p{..} classes (the
//    reference regexes of conversion.md §5.5 and js-tiktoken, with `&&` as a lookahead and the
//    white-space sets spelled out), run directly on the UTF-8 text;
//  * llama.cpp's kimi-k2 rules 1–7 of §5.5, coded as written.
// PCRE2 10.42 has Unicode 14.0, so the UCP regexes agree with k3 only on code points whose
// properties did not change between 14.0 and the table k3 uses; callers filter on that.
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace k3::tok::testref {

inline const char* kHanRanges =
    "\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}\\x{2B740}-\\x{2B81F}"
    "\\x{2B820}-\\x{2CEAF}\\x{2CEB0}-\\x{2EBEF}\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}";
// White_Space, and JavaScript's \s (White_Space without U+0085, with U+FEFF).
inline const char* kWs = "\\t\\n\\x0B\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
inline const char* kJsWs = "\\t\\n\\x0B\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

inline std::string ucp_pattern(PreType t) {
  const bool js = t == PreType::cl100k_base || t == PreType::o200k_base;
  const std::string S = std::string("[") + (js ? kJsWs : kWs) + "]", NS = std::string("[^") + (js ? kJsWs : kWs) + "]";
  const std::string notS_L_N = std::string("[^") + (js ? kJsWs : kWs) + "\\p{L}\\p{N}]";
  const std::string tail = "|\\p{N}{1,3}| ?" + notS_L_N + "+[\\r\\n" + (t == PreType::o200k_base ? "/" : "") + "]*|" + S +
                           "*[\\r\\n]+|" + S + "+(?!" + NS + ")|" + S + "+";
  const std::string c_ascii = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  switch (t) {
    case PreType::kimi_k2: {
      const std::string han = std::string("[") + kHanRanges + "]";
      return han + "+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!" + han + ")\\p{L})+" + c_ascii + "?" + tail;
    }
    case PreType::kimi_k2_regex: {
      const std::string up = "(?:(?!\\p{sc=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])";
      const std::string lo = "(?:(?!\\p{sc=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])";
      const std::string c = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
      return "[\\p{sc=Han}]+|[^\\r\\n\\p{L}\\p{N}]?" + up + "*" + lo + "+" + c + "?|[^\\r\\n\\p{L}\\p{N}]?" + up + "+" + lo +
             "*" + c + "?" + tail;
    }
    case PreType::cl100k_base:
      return c_ascii + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" + tail;
    case PreType::o200k_base: {
      const std::string up = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]", lo = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
      return "[^\\r\\n\\p{L}\\p{N}]?" + up + "*" + lo + "+" + c_ascii + "?|[^\\r\\n\\p{L}\\p{N}]?" + up + "+" + lo + "*" +
             c_ascii + "?" + tail;
    }
    case PreType::gpt2:
      return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" + notS_L_N + "+|" + S + "+(?!" + NS + ")|" + S + "+";
  }
  return {};
}

// A compiled UTF+UCP regex with find-all.
class UcpRegex {
 public:
  explicit UcpRegex(const std::string& pattern, bool jit = true) {
    int err;
    PCRE2_SIZE off;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &off, nullptr);
    if (!code_) throw std::runtime_error("UCP pattern does not compile at " + std::to_string(off));
    if (jit) pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
    md_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~UcpRegex() {
    pcre2_match_data_free(md_);
    pcre2_code_free(code_);
  }
  void split(std::string_view s, std::vector<Span>& out) const {
    size_t pos = 0;
    while (pos < s.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, PCRE2_NO_UTF_CHECK, md_, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
      out.push_back({static_cast<uint32_t>(ov[0]), static_cast<uint32_t>(ov[1])});
      pos = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
  }
  bool matches_whole(std::string_view s) const {
    int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         md_, nullptr);
    return rc >= 0 && pcre2_get_ovector_pointer(md_)[1] == s.size();
  }

 private:
  pcre2_code* code_;
  pcre2_match_data* md_;
};

// llama.cpp's kimi-k2 splitter as the rules of §5.5, over Unicode 15.1 properties.
inline std::vector<std::string> kimi_k2_rules(std::string_view text) {
  std::vector<uint32_t> cp;
  std::vector<size_t> at;
  for (size_t i = 0; i < text.size();) {
    at.push_back(i);
    cp.push_back(utf8_next(text, i));
  }
  at.push_back(text.size());
  const size_t n = cp.size();
  auto props = [&](size_t i) { return unicode_props(cp[i], UnicodeVersion::v15_1); };
  auto han = [&](size_t i) { return i < n && in_han_ranges(cp[i]); };
  auto letter = [&](size_t i) {  // any letter, Han included
    uint8_t g = props(i) & uprop::kGroupMask;
    return g >= uprop::kLu && g <= uprop::kLo;
  };
  auto nh_letter = [&](size_t i) { return i < n && !han(i) && letter(i); };
  auto digit = [&](size_t i) { return i < n && (props(i) & uprop::kGroupMask) == uprop::kN; };
  auto space = [&](size_t i) { return i < n && (props(i) & uprop::kWhiteSpace); };
  auto crlf = [&](size_t i) { return i < n && (cp[i] == '\r' || cp[i] == '\n'); };
  auto other = [&](size_t i) { return i < n && !space(i) && !letter(i) && !digit(i); };
  auto lower = [&](size_t i) { return i < n && cp[i] < 128 ? cp[i] | 0x20 : 0u; };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    if (han(i)) {  // 1
      while (han(j)) ++j;
    } else if (nh_letter(i) || (!crlf(i) && !letter(i) && !digit(i) && nh_letter(i + 1))) {  // 2
      j = nh_letter(i) ? i : i + 1;
      while (nh_letter(j)) ++j;
      if (j < n && cp[j] == '\'') {
        uint32_t a = lower(j + 1), b = lower(j + 2);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') j += 2;
        else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j += 3;
      }
    } else if (digit(i)) {  // 3
      while (digit(j) && j < i + 3) ++j;
    } else if (other(i) || (cp[i] == ' ' && other(i + 1))) {  // 4
      if (cp[i] == ' ') ++j;
      while (other(j)) ++j;
      while (crlf(j)) ++j;
    } else {  // whitespace
      size_t e = i;
      while (space(e)) ++e;
      size_t last_nl = n;
      for (size_t k = i; k < e; ++k)
        if (crlf(k)) last_nl = k;
      if (last_nl != n) j = last_nl + 1;                  // 5
      else if (e - i >= 2 && e < n) j = e - 1;             // 6
      else j = e;                                          // 7
    }
    out.emplace_back(text.substr(at[i], at[j] - at[i]));
    i = j;
  }
  return out;
}

}  // namespace k3::tok::testref
