// Tokenizer behaviour on small vocabularies: BPE, special tokens, end-of-generation ids, decoding,
// streaming, invalid input and load errors.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

using namespace k3;
using namespace k3::tok;

namespace {

using Ids = std::vector<int32_t>;

// Bytes (rank = byte value), a few merged words, then the K3-style specials.
VocabSpec small_spec() {
  VocabSpec s;
  for (int b = 0; b < 256; ++b) s.ranked.push_back(std::string(1, char(b)));
  for (const char* t : {"he", "ll", "hell", "hello", " w", "or", " wor", "ld", " world", "\xE4\xBD", "你", " t", "th", " the", "\n\n"})
    s.ranked.push_back(t);
  const int32_t base = static_cast<int32_t>(s.ranked.size());
  s.specials = {{base, "[BOS]"}, {base + 1, "[EOS]"}, {base + 2, "<|end_of_msg|>"}, {base + 3, "<|open|>"},
                {base + 4, "<|close|>"}, {base + 5, "<|sep|>"}, {base + 6, "[EOT]"}, {base + 7, "[PAD]"}};
  s.n_vocab = base + 10;
  s.bos_id = base, s.eos_id = base + 2, s.pad_id = base + 7;
  return s;
}

gguf::Metadata meta_of(const VocabSpec& s) {
  gguf::Metadata m;
  write_vocab(s, m);
  return m;
}

std::unique_ptr<Tokenizer> small() { return Tokenizer::from_metadata(meta_of(small_spec())); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Tokenizer, EncodesAndDecodes) {
  auto t = small();
  const int32_t hello = t->token_id("hello"), world = t->token_id("\u0120world");
  ASSERT_GE(hello, 256);
  ASSERT_GE(world, 256);
  EXPECT_EQ(t->encode("hello world", false), (Ids{hello, world}));
  EXPECT_EQ(t->piece(world), " world");
  EXPECT_EQ(t->decode(t->encode("hello world\n\nhello", false), false), "hello world\n\nhello");
  EXPECT_EQ(t->encode("", false), Ids{});
  EXPECT_EQ(t->n_vocab(), 256 + 15 + 10);
  EXPECT_STREQ(t->pre_name(), "kimi-k2");
}

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
  auto t = small();
  const int32_t open = t->token_id("<|open|>"), sep = t->token_id("<|sep|>");
  EXPECT_TRUE(t->is_special(open));
  Ids with = t->encode("<|open|>hello<|sep|>", true);
  EXPECT_EQ(with, (Ids{open, t->token_id("hello"), sep}));
  Ids without = t->encode("<|open|>hello<|sep|>", false);
  EXPECT_EQ(std::count(without.begin(), without.end(), open), 0);
  EXPECT_EQ(t->decode(without, false), "<|open|>hello<|sep|>");
  // Reserved names are CONTROL tokens too; no whitespace is stripped around specials.
  Ids r = t->encode(" <|reserved_token_279|> ", true);
  EXPECT_EQ(r, (Ids{32, 279, 32}));
  // Rendered or hidden.
  EXPECT_EQ(t->decode(with, true), "<|open|>hello<|sep|>");
  EXPECT_EQ(t->decode(with, false), "hello");
}

TEST(Tokenizer, LongestSpecialFirst) {
  VocabSpec s = small_spec();
  s.specials = {{271, "ab"}, {272, "bcd"}, {273, "xyxy"}, {274, "xy"}};
  s.n_vocab = 275;
  s.bos_id = s.eos_id = s.pad_id = -1;
  auto t = Tokenizer::from_metadata(meta_of(s));
  EXPECT_EQ(t->encode("abcd", true), (Ids{'a', 272}));  // "bcd" is longer than "ab" and goes first
  EXPECT_EQ(t->encode("xyxyxy", true), (Ids{273, 274}));
  EXPECT_EQ(t->encode("abab", true), (Ids{271, 271}));
}

TEST(Tokenizer, UserDefinedTokensAlwaysMatch) {
  gguf::Metadata m = meta_of(small_spec());
  auto types = std::get<std::vector<int32_t>>(m.get_array("tokenizer.ggml.token_type").data);
  auto tokens = std::get<std::vector<std::string>>(m.get_array("tokenizer.ggml.tokens").data);
  tokens[280] = "<think>";
  types[280] = USER_DEFINED;
  gguf::Array a;
  a.elem = gguf::ValueType::INT32;
  a.data = types;
  m.set("tokenizer.ggml.token_type", gguf::Value::array(a));
  gguf::Array b;
  b.elem = gguf::ValueType::STRING;
  b.data = tokens;
  m.set("tokenizer.ggml.tokens", gguf::Value::array(b));
  auto t = Tokenizer::from_metadata(m);
  EXPECT_EQ(t->encode("<think>", false), Ids{280});
  EXPECT_EQ(t->decode({280}, false), "<think>");  // user-defined tokens are text
  EXPECT_TRUE(t->is_special(280));
}

TEST(Tokenizer, EndOfGeneration) {
  auto t = small();
  const int32_t base = 271;
  EXPECT_EQ(t->bos(), base);
  EXPECT_EQ(t->eos(), base + 2);
  EXPECT_EQ(t->eot(), base + 6);
  EXPECT_EQ(t->pad(), base + 7);
  EXPECT_TRUE(t->is_eog(base + 2));  // eos (<|end_of_msg|>)
  EXPECT_TRUE(t->is_eog(base + 1));  // [EOS]
  EXPECT_TRUE(t->is_eog(base + 6));  // [EOT]
  EXPECT_TRUE(t->is_eog(base + 7));  // [PAD]
  EXPECT_FALSE(t->is_eog(base));
  EXPECT_FALSE(t->is_eog(base + 3));
  EXPECT_FALSE(t->add_bos());
}

TEST(Tokenizer, StreamDecoderHoldsPartialUtf8) {
  auto t = small();
  // "你" as its three byte tokens, then a special and an emoji split across tokens.
  StreamDecoder sd(*t, false);
  EXPECT_EQ(sd.push(0xE4), "");
  EXPECT_EQ(sd.push(0xBD), "");
  EXPECT_EQ(sd.push(0xA0), "你");
  EXPECT_EQ(sd.push(t->token_id("<|open|>")), "");
  EXPECT_EQ(sd.push(0xF0), "");
  EXPECT_EQ(sd.push(0x9F), "");
  EXPECT_EQ(sd.push('x'), "\xF0\x9Fx");  // an interrupted sequence is passed on as it is
  EXPECT_EQ(sd.push(0xE4), "");
  EXPECT_EQ(sd.flush(), "\xE4");
  StreamDecoder shown(*t, true);
  EXPECT_EQ(shown.push(t->token_id("<|open|>")), "<|open|>");
}

TEST(Tokenizer, InvalidUtf8IsReplaced) {
  auto t = small();
  EXPECT_EQ(t->encode("a\xFF" "b", false), t->encode("a\uFFFDb", false));
  EXPECT_EQ(t->encode("\xE4\xBD", false), t->encode("\uFFFD", false));
  EXPECT_EQ(t->encode("\xED\xA0\x80", false), t->encode("\uFFFD\uFFFD\uFFFD", false));
  EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98" "A\xC0\xAF"), "\uFFFD" "A\uFFFD\uFFFD");
}

TEST(Tokenizer, NoMergesMeansBytes) {
  gguf::Metadata m = meta_of(small_spec());
  m.erase("tokenizer.ggml.merges");
  auto t = Tokenizer::from_metadata(m);
  EXPECT_EQ(t->encode("hello", false), (Ids{'h', 'e', 'l', 'l', 'o'}));
}

TEST(Tokenizer, RankAndMergeBpeAgreeOnSmallVocab) {
  VocabSpec s = small_spec();
  auto merge = Tokenizer::from_metadata(meta_of(s));
  auto rank = Tokenizer::from_ranks(s.ranked, s.specials, "kimi-k2");
  for (const char* text : {"hello world", "hellohello the world", "  the\n\n\nworld", "你你你 好"})
    EXPECT_EQ(merge->encode(text, false), rank->encode(text, false)) << text;
}

TEST(Tokenizer, HeapAndDirectMergeLoopsAgree) {
  std::mt19937 rng(3);
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t n = 1 + rng() % 60;
    std::vector<BpePart> a(n);
    for (uint32_t i = 0; i < n; ++i) a[i] = {i, i + 1, static_cast<uint32_t>(rng() % 3)};
    // Pair rank: a function of the symbols and the merged length, so ties are frequent.
    auto pair = [](const BpePart& l, const BpePart& r) -> BpePairRank {
      uint32_t len = r.end - l.start;
      if (len > 8) return {-1, 0};
      return {static_cast<int32_t>((l.sym * 3 + r.sym) % 5 + len), (l.sym + r.sym + 1) % 3};
    };
    std::vector<BpePart> b = a;
    bpe_merge(a, pair, false);
    bpe_merge(b, pair, true);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].start == b[i].start && a[i].end == b[i].end && a[i].sym == b[i].sym);
  }
}

TEST(Tokenizer, LongPieces) {
  auto t = small();
  std::string s(200000, 'l');
  auto ids = t->encode(s, false);
  EXPECT_EQ(ids.size(), 100000u);
  EXPECT_EQ(t->decode(ids, false), s);
  std::string ws(100000, ' ');
  EXPECT_EQ(t->decode(t->encode(ws + "x" + ws, false), false), ws + "x" + ws);
}

TEST(Tokenizer, LoadErrors) {
  auto e = [](const gguf::Metadata& m) { return error_of([&] { Tokenizer::from_metadata(m); }); };
  gguf::Metadata m = meta_of(small_spec());
  m.context = "f.gguf";
  m.set("tokenizer.ggml.model", gguf::Value::str("llama"));
  EXPECT_EQ(e(m), "f.gguf: tokenizer.ggml.model 'llama' is not supported (k3 reads gpt2 byte-level BPE vocabularies)");
  m.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  m.set("tokenizer.ggml.pre", gguf::Value::str("qwen2"));
  EXPECT_EQ(e(m), "f.gguf: tokenizer.ggml.pre: unsupported pre-tokenizer 'qwen2' (k3 supports kimi-k2, kimi-k2-regex, "
                  "cl100k_base, o200k_base, default)");
  m.set("tokenizer.ggml.pre", gguf::Value::str("kimi-k2"));
  m.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(5000));
  EXPECT_EQ(e(m), "f.gguf: tokenizer.ggml.bos_token_id = 5000 is out of range (the vocabulary has 281 tokens)");
  m.set("tokenizer.ggml.bos_token_id", gguf::Value::i32(1));
  EXPECT_NE(e(m).find("has wrong type INT32, expected UINT32"), std::string::npos);
  m.erase("tokenizer.ggml.bos_token_id");
  gguf::Array bad;
  bad.elem = gguf::ValueType::STRING;
  bad.data = std::vector<std::string>{"a b", "nospace"};
  m.set("tokenizer.ggml.merges", gguf::Value::array(bad));
  EXPECT_EQ(e(m), "f.gguf: tokenizer.ggml.merges[1]: 'nospace' is not two token texts separated by a space");
  m.erase("tokenizer.ggml.merges");
  gguf::Array types;
  types.elem = gguf::ValueType::INT32;
  types.data = std::vector<int32_t>{1, 1};
  m.set("tokenizer.ggml.token_type", gguf::Value::array(types));
  EXPECT_EQ(e(m), "f.gguf: tokenizer.ggml.token_type has 2 entries, tokenizer.ggml.tokens 281");
  m.erase("tokenizer.ggml.tokens");
  EXPECT_EQ(e(m), "f.gguf: key 'tokenizer.ggml.tokens' not found");

  auto t = small();
  EXPECT_EQ(error_of([&] { t->piece(281); }), "token id 281 is out of range [0, 281)");
  EXPECT_EQ(error_of([&] { t->decode({1, -1}, false); }), "token id -1 is out of range [0, 281)");
}
