// Pre-tokenizer splits: the examples of conversion.md §5.5 and the tiktoken patterns.
#include <gtest/gtest.h>

#include "tokenizer/pretokenizer.h"

using namespace k3::tok;

namespace {
std::vector<std::string> split(PreType t, std::string_view s) {
  PreTokenizer p(t);
  std::vector<Span> spans;
  p.split(s, spans);
  std::vector<std::string> out;
  for (auto sp : spans) out.emplace_back(s.substr(sp.begin, sp.end - sp.begin));
  return out;
}
using V = std::vector<std::string>;
}  // namespace

TEST(PreTokenizer, KimiK2SpecExamples) {
  const PreType k = PreType::kimi_k2;
  EXPECT_EQ(split(k, "HelloWorld's test"), (V{"HelloWorld's", " test"}));
  EXPECT_EQ(split(k, "abcDEF"), (V{"abcDEF"}));
  EXPECT_EQ(split(k, "cafe\u0301s"), (V{"cafe", "\u0301s"}));
  EXPECT_EQ(split(k, "नमस्ते"), (V{"नमस", "्त", "े"}));
  EXPECT_EQ(split(k, "x²+1"), (V{"x", "²", "+", "1"}));
  EXPECT_EQ(split(k, "a々b"), (V{"a々b"}));
  EXPECT_EQ(split(k, "Hi!\n\nOK"), (V{"Hi", "!\n\n", "OK"}));
  EXPECT_EQ(split(k, "don'tcha"), (V{"don't", "cha"}));
  EXPECT_EQ(split(k, "...hello"), (V{"...", "hello"}));
  EXPECT_EQ(split(k, " .hello"), (V{" .", "hello"}));
  EXPECT_EQ(split(k, "'hello"), (V{"'hello"}));
  EXPECT_EQ(split(k, "  \n  \n  x"), (V{"  \n  \n", " ", " x"}));
  EXPECT_EQ(split(k, "a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split(k, "x  "), (V{"x", "  "}));
  EXPECT_EQ(split(k, "it’s"), (V{"it", "’s"}));
  EXPECT_EQ(split(k, "你好世界abc"), (V{"你好世界", "abc"}));
  EXPECT_EQ(split(k, "12345"), (V{"123", "45"}));
  // Ext. I (Unicode 15.1) is a letter, not Han; Ext. J (17.0) is unassigned in 15.1: other.
  EXPECT_EQ(split(k, "a\U0002EBF0b"), (V{"a\U0002EBF0b"}));
  EXPECT_EQ(split(k, "a\U000323B0b"), (V{"a", "\U000323B0b"}));
  EXPECT_EQ(split(k, "a\U000323B0\U000323B0b"), (V{"a", "\U000323B0\U000323B0", "b"}));
}

TEST(PreTokenizer, KimiK2RegexDiffers) {
  const PreType k = PreType::kimi_k2_regex;
  EXPECT_EQ(split(k, "HelloWorld's test"), (V{"Hello", "World's", " test"}));
  EXPECT_EQ(split(k, "abcDEF"), (V{"abc", "DEF"}));
  EXPECT_EQ(split(k, "नमस्ते"), (V{"नमस्ते"}));
  EXPECT_EQ(split(k, "it'ſ"), (V{"it'ſ"}));
  EXPECT_EQ(split(k, "你好世界abc"), (V{"你好世界", "abc"}));
}

TEST(PreTokenizer, Tiktoken) {
  EXPECT_EQ(split(PreType::cl100k_base, "HelloWorld's test 12345"), (V{"HelloWorld", "'s", " test", " ", "123", "45"}));
  EXPECT_EQ(split(PreType::o200k_base, "HelloWorld's test"), (V{"Hello", "World's", " test"}));
  EXPECT_EQ(split(PreType::o200k_base, "a//\n"), (V{"a", "//\n"}));
  // JavaScript's \s: U+FEFF is space, U+0085 is not.
  EXPECT_EQ(split(PreType::cl100k_base, "a\uFEFF\uFEFFb"), (V{"a", "\uFEFF", "\uFEFFb"}));
  EXPECT_EQ(split(PreType::kimi_k2, "a\uFEFF\uFEFFb"), (V{"a", "\uFEFF\uFEFF", "b"}));
  EXPECT_EQ(split(PreType::kimi_k2, "a\u0085\u0085b"), (V{"a", "\u0085", "\u0085b"}));
}

// ---- differential checks against independent references (ucp_reference.h) ----

#include <random>

#include "ucp_reference.h"

namespace {

// Code points to draw random strings from: the characters the rules treat specially, samples of
// many scripts and categories, Han-range edges (assigned or not), and random code points.
std::vector<uint32_t> palette() {
  std::vector<uint32_t> p;
  for (uint32_t c = 0x09; c <= 0x0D; ++c) p.push_back(c);
  for (uint32_t c = 0x1C; c <= 0x7E; ++c) p.push_back(c);
  for (uint32_t c : {'s', 't', 'r', 'e', 'v', 'm', 'l', 'd', 'S', 'T', 'R', 'E', 'V', 'M', 'L', 'D', '\'', '\'', ' ', ' ', ' ', '\n', '/'})
    p.push_back(c);
  for (uint32_t c : {0x85u, 0xA0u, 0xAAu, 0xADu, 0xB2u, 0xBDu, 0xC0u, 0xDFu, 0xE9u, 0x17Fu, 0x1C5u, 0x295u, 0x2B0u, 0x300u, 0x301u,
                     0x345u, 0x3A3u, 0x3C3u, 0x416u, 0x436u, 0x5D0u, 0x5B8u, 0x627u, 0x64Bu, 0x663u, 0x6F3u, 0x915u, 0x93Eu, 0x94Du,
                     0x966u, 0xE01u, 0xE31u, 0x1680u, 0x180Eu, 0x2000u, 0x200Bu, 0x200Du, 0x2019u, 0x2028u, 0x202Fu, 0x205Fu, 0x2160u,
                     0x2460u, 0x2E80u, 0x2FFCu, 0x3000u, 0x3005u, 0x3007u, 0x3021u, 0x3041u, 0x30A1u, 0x31EFu, 0x3400u, 0x4DBFu,
                     0x4DC0u, 0x4E00u, 0x9FA5u, 0x9FFFu, 0xAC00u, 0xF900u, 0xFA6Eu, 0xFAFFu, 0xFB01u, 0xFEFFu, 0xFF10u, 0xFF21u,
                     0xFFFDu, 0x1D7CEu, 0x1F600u, 0x1F3FDu, 0x1FAE8u, 0x1FAE9u, 0x20000u, 0x2A6DFu, 0x2A6E0u, 0x2A700u, 0x2B73Au,
                     0x2B81Fu, 0x2CEAFu, 0x2EBE0u, 0x2EBEFu, 0x2EBF0u, 0x2F800u, 0x2FA1Eu, 0x30000u, 0x31350u, 0x323B0u, 0x16FF0u,
                     0x10D40u, 0x1E5D0u, 0xE0001u, 0xF0000u, 0x10FFFFu})
    p.push_back(c);
  std::mt19937 rng(11);
  for (int i = 0; i < 400; ++i) {
    uint32_t c = rng() % 0x110000;
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    p.push_back(c);
  }
  for (int i = 0; i < 400; ++i) p.push_back(0x80 + rng() % 0x3000);  // dense part of the BMP
  return p;
}

std::vector<std::string> split_of(const PreTokenizer& p, std::string_view s) {
  std::vector<Span> spans;
  p.split(s, spans);
  std::vector<std::string> out;
  for (auto sp : spans) out.emplace_back(s.substr(sp.begin, sp.end - sp.begin));
  return out;
}

std::string random_text(std::mt19937& rng, const std::vector<uint32_t>& pal) {
  std::string s;
  int n = 1 + rng() % 10;
  for (int i = 0; i < n; ++i) {
    uint32_t c = (rng() % 3 == 0) ? "aZ x'\n1.s"[rng() % 9] : pal[rng() % pal.size()];
    s += utf8_encode(c);
  }
  return s;
}

}  // namespace

TEST(PreTokenizer, KimiK2MatchesTheRulesOfTheSpec) {
  PreTokenizer p(PreType::kimi_k2);
  auto pal = palette();
  std::mt19937 rng(5);
  int bad = 0;
  for (int i = 0; i < 100000; ++i) {
    std::string s = random_text(rng, pal);
    auto a = split_of(p, s), b = testref::kimi_k2_rules(s);
    if (a != b && ++bad <= 5) ADD_FAILURE() << "'" << s << "': " << a.size() << " pieces vs rules " << b.size();
  }
  EXPECT_EQ(bad, 0);
}

// The class-mapped byte patterns against the reference regexes run by PCRE2 with UTF+UCP, on
// code points whose properties PCRE2's own Unicode (14.0 in 10.42) gives the same.
TEST(PreTokenizer, ClassMappedPatternsMatchUcpRegexes) {
  const testref::UcpRegex lu("\\p{Lu}"), ll("\\p{Ll}"), lt("\\p{Lt}"), lm("\\p{Lm}"), lo("\\p{Lo}"), mk("\\p{M}"),
      nn("\\p{N}"), hs("\\p{sc=Han}");
  auto pcre_props = [&](uint32_t c) -> uint8_t {
    std::string s = utf8_encode(c);
    uint8_t g = lu.matches_whole(s) ? 1 : ll.matches_whole(s) ? 2 : lt.matches_whole(s) ? 3 : lm.matches_whole(s) ? 4
              : lo.matches_whole(s) ? 5 : mk.matches_whole(s) ? 6 : nn.matches_whole(s) ? 7 : 0;
    return g | (hs.matches_whole(s) ? uprop::kHanScript : 0);
  };
  for (PreType t : {PreType::kimi_k2, PreType::kimi_k2_regex, PreType::cl100k_base, PreType::o200k_base, PreType::gpt2}) {
    const UnicodeVersion v = (t == PreType::cl100k_base || t == PreType::o200k_base) ? UnicodeVersion::v17_0 : UnicodeVersion::v15_1;
    std::vector<uint32_t> pal;
    size_t dropped = 0;
    for (uint32_t c : palette()) {
      if ((pcre_props(c) | uprop::kWhiteSpace) == (unicode_props(c, v) | uprop::kWhiteSpace))
        pal.push_back(c);
      else
        ++dropped;
    }
    PreTokenizer p(t);
    testref::UcpRegex ref(testref::ucp_pattern(t));
    std::mt19937 rng(17);
    int bad = 0;
    for (int i = 0; i < 30000; ++i) {
      std::string s = random_text(rng, pal);
      std::vector<Span> b;
      ref.split(s, b);
      std::vector<std::string> want;
      for (auto sp : b) want.emplace_back(s.substr(sp.begin, sp.end - sp.begin));
      auto got = split_of(p, s);
      if (got != want && ++bad <= 5) ADD_FAILURE() << pre_type_name(t) << " '" << s << "': " << got.size() << " pieces, UCP regex " << want.size();
    }
    EXPECT_EQ(bad, 0) << pre_type_name(t);
    EXPECT_LT(dropped, 60u) << pre_type_name(t) << ": code points left out as PCRE2's Unicode differs";
  }
}
