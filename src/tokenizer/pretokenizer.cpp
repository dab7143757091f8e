#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace k3::tok {

namespace {

// Class bytes. kimi_k2 uses its own six; the other types use 0x80 | group (uprop group 0..7),
// 0x88 for white space, 0x90 | group for Script=Han (kimi_k2_regex), 0xA0 for U+017F.
enum : uint8_t {
  kK2HanLetter = 0x80, kK2HanOther = 0x81, kK2Letter = 0x82, kK2Digit = 0x83, kK2Space = 0x84, kK2Other = 0x85,
  kGOther = 0x80, kGLu = 0x81, kGLl = 0x82, kGLt = 0x83, kGLm = 0x84, kGLo = 0x85, kGM = 0x86, kGN = 0x87,
  kGSpace = 0x88, kHan = 0x90, kLongS = 0xA0,
};

std::string x(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", b);
  return buf;
}

const std::string kCrLf = "\\r\\n";
const std::string kAsciiSpace = "\\t\\n\\x0b\\f\\r ";

template <class... A>
std::string cat(const A&... parts) {
  std::string s;
  (s.append(std::string_view(parts)), ...);
  return s;
}

std::string build_pattern(PreType t) {
  const std::string contr_ascii = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  if (t == PreType::kimi_k2) {
    const std::string han = cat(x(kK2HanLetter), x(kK2HanOther));
    const std::string letter = cat("A-Za-z", x(kK2HanLetter), x(kK2Letter));  // \p{L}
    const std::string letter_nohan = cat("A-Za-z", x(kK2Letter));             // [\p{L}--[HAN]]
    const std::string digit = cat("0-9", x(kK2Digit));
    const std::string space = cat(kAsciiSpace, x(kK2Space));
    return cat("[", han, "]+",                                                          //
               "|[^", kCrLf, letter, digit, "]?[", letter_nohan, "]+", contr_ascii, "?",  //
               "|[", digit, "]{1,3}",                                                   //
               "| ?[^", space, letter, digit, "]+[", kCrLf, "]*",                       //
               "|[", space, "]*[", kCrLf, "]+",                                         //
               "|[", space, "]+(?![^", space, "])",                                     //
               "|[", space, "]+");
  }
  const bool han_script = t == PreType::kimi_k2_regex;
  // The bytes of one group, with its Script=Han twin for kimi_k2_regex when with_han.
  auto grp = [&](uint8_t g, bool with_han) { return cat(x(0x80 | g), with_han && han_script ? x(kHan | g) : ""); };
  const std::string long_s = han_script ? x(kLongS) : "";
  const std::string letter = cat("A-Za-z", grp(1, true), grp(2, true), long_s, grp(3, true), grp(4, true), grp(5, true));
  const std::string digit = cat("0-9", grp(7, true));
  const std::string space = cat(kAsciiSpace, x(kGSpace));
  const std::string lead = cat("[^", kCrLf, letter, digit, "]?");
  const std::string tail = cat("|[", digit, "]{1,3}",                                                              //
                               "| ?[^", space, letter, digit, "]+[", kCrLf, t == PreType::o200k_base ? "/" : "", "]*",  //
                               "|[", space, "]*[", kCrLf, "]+",                                                    //
                               "|[", space, "]+(?![^", space, "])",                                                //
                               "|[", space, "]+");
  switch (t) {
    case PreType::cl100k_base:
      return cat(contr_ascii, "|", lead, "[", letter, "]+", tail);
    case PreType::o200k_base:
    case PreType::kimi_k2_regex: {
      // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}], minus Script=Han for Kimi
      // (grp(.., false) leaves out the Han bytes); Kimi's (?i:..) also folds U+017F to s.
      const std::string upper = cat("[A-Z", grp(1, false), grp(3, false), grp(4, false), grp(5, false), grp(6, false), "]");
      const std::string lower = cat("[a-z", grp(2, false), long_s, grp(4, false), grp(5, false), grp(6, false), "]");
      const std::string contr =
          han_script ? cat("(?:'[sS", long_s, "]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])") : contr_ascii;
      const std::string han = han_script ? cat("[", x(kHan), "-", x(kHan | 15), "]+|") : "";
      return cat(han, lead, upper, "*", lower, "+", contr, "?|", lead, upper, "+", lower, "*", contr, "?", tail);
    }
    case PreType::gpt2:
      return cat("'s|'t|'re|'ve|'m|'ll|'d| ?[", letter, "]+| ?[", digit, "]+| ?[^", space, letter, digit, "]+",  //
                 "|[", space, "]+(?![^", space, "])|[", space, "]+");
    default:
      break;
  }
  K3_ASSERT(false);
  return {};
}

}  // namespace

PreType pre_type_from_name(std::string_view name) {
  if (name == "kimi-k2") return PreType::kimi_k2;
  if (name == "kimi-k2-regex") return PreType::kimi_k2_regex;
  if (name == "cl100k_base") return PreType::cl100k_base;
  if (name == "o200k_base") return PreType::o200k_base;
  if (name == "default" || name == "gpt2" || name == "gpt-2") return PreType::gpt2;
  fail("unsupported pre-tokenizer '%.*s' (k3 supports kimi-k2, kimi-k2-regex, cl100k_base, o200k_base, default)",
       static_cast<int>(name.size()), name.data());
}

const char* pre_type_name(PreType t) {
  switch (t) {
    case PreType::kimi_k2: return "kimi-k2";
    case PreType::kimi_k2_regex: return "kimi-k2-regex";
    case PreType::cl100k_base: return "cl100k_base";
    case PreType::o200k_base: return "o200k_base";
    case PreType::gpt2: return "default";
  }
  return "?";
}

PreTokenizer::PreTokenizer(PreType type) : type_(type) {
  const bool js = type == PreType::cl100k_base || type == PreType::o200k_base;
  table_ = &UnicodeTable::get(js ? UnicodeVersion::v17_0 : UnicodeVersion::v15_1);
  for (int p = 0; p < 32; ++p) {
    uint8_t g = p & uprop::kGroupMask;
    bool ws = p & uprop::kWhiteSpace, han = p & uprop::kHanScript;
    if (type == PreType::kimi_k2)
      lut_[p] = ws ? kK2Space : (g >= uprop::kLu && g <= uprop::kLo) ? kK2Letter : g == uprop::kN ? kK2Digit : kK2Other;
    else
      lut_[p] = ws ? kGSpace : ((han && type == PreType::kimi_k2_regex) ? kHan : 0x80) | g;
  }
  pattern_ = build_pattern(type);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), 0, &err, &err_off,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("pre-tokenizer %s: pattern does not compile at %zu: %s", pre_type_name(type), static_cast<size_t>(err_off),
         reinterpret_cast<char*>(msg));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

uint8_t PreTokenizer::class_of(uint32_t cp) const {
  switch (type_) {
    case PreType::kimi_k2:
      if (in_han_ranges(cp)) {
        uint8_t g = table_->get(cp) & uprop::kGroupMask;
        return (g >= uprop::kLu && g <= uprop::kLo) ? kK2HanLetter : kK2HanOther;
      }
      break;
    case PreType::kimi_k2_regex:
      if (cp == 0x17F) return kLongS;
      break;
    case PreType::cl100k_base:
    case PreType::o200k_base:
      // JavaScript's \s: White_Space without U+0085, plus U+FEFF.
      if (cp == 0x85) return kGOther;
      if (cp == 0xFEFF) return kGSpace;
      break;
    default:
      break;
  }
  return lut_[table_->get(cp) & 31];
}

void PreTokenizer::run(const uint8_t* subject, size_t n, const uint32_t* offsets, std::vector<Span>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (!md) throw std::bad_alloc();
  size_t pos = 0;
  while (pos < n) {
    int rc = jit_ ? pcre2_jit_match(code, subject, n, pos, 0, md, nullptr)
                  : pcre2_match(code, subject, n, pos, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("pre-tokenizer %s: PCRE2 match error %d at offset %zu", pre_type_name(type_), rc, pos);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e <= b) {  // no pattern here matches empty, but never loop
      pos = b + 1;
      continue;
    }
    if (offsets)
      out.push_back({offsets[b], offsets[e]});
    else
      out.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
    pos = e;
  }
  pcre2_match_data_free(md);
}

void PreTokenizer::split(std::string_view text, std::vector<Span>& out) const {
  if (text.size() >= 0xFFFFFFFFu) fail("pre-tokenizer: text of %zu bytes is too long (limit 4 GiB)", text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, s + i, 8);
    if (w & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < n && s[i] < 0x80) ++i;
  if (i == n) {  // ASCII maps to itself
    run(s, n, nullptr, out);
    return;
  }
  std::vector<uint8_t> mapped;
  std::vector<uint32_t> offsets;
  mapped.reserve(n);
  offsets.reserve(n + 1);
  mapped.assign(s, s + i);
  for (size_t k = 0; k < i; ++k) offsets.push_back(static_cast<uint32_t>(k));
  while (i < n) {
    uint8_t c = s[i];
    offsets.push_back(static_cast<uint32_t>(i));
    if (c < 0x80) {
      mapped.push_back(c);
      ++i;
      continue;
    }
    uint32_t cp;
    size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + len > n) {  // truncated sequence (callers pass well-formed text): one "other" code point
      mapped.push_back(class_of(0xFFFD));
      i = n;
      continue;
    }
    if (c < 0xE0) {
      cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
      i += 2;
    } else if (c < 0xF0) {
      cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
      i += 3;
    } else {
      cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
      i += 4;
    }
    mapped.push_back(class_of(cp));
  }
  offsets.push_back(static_cast<uint32_t>(n));
  run(mapped.data(), mapped.size(), offsets.data(), out);
}

}  // namespace k3::tok
