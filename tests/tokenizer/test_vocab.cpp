// tiktoken import, byte-level token strings, merges from ranks and the GGUF vocabulary keys.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "common/error.h"
#include "tokenizer/vocab.h"

using namespace k3;
using namespace k3::tok;

namespace {

std::string b64(std::string_view s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= s.size(); i += 3) {
    uint32_t w = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
    for (int k = 3; k >= 0; --k) out += t[(w >> (6 * k)) & 63];
  }
  if (s.size() - i == 1) {
    uint32_t w = uint8_t(s[i]) << 16;
    out += t[w >> 18], out += t[(w >> 12) & 63], out += "==";
  } else if (s.size() - i == 2) {
    uint32_t w = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
    out += t[w >> 18], out += t[(w >> 12) & 63], out += t[(w >> 6) & 63], out += '=';
  }
  return out;
}

// 256 single bytes (rank = byte) followed by `extra`.
std::vector<std::string> byte_ranks(std::vector<std::string> extra = {}) {
  std::vector<std::string> r;
  for (int b = 0; b < 256; ++b) r.push_back(std::string(1, char(b)));
  r.insert(r.end(), extra.begin(), extra.end());
  return r;
}

std::string file_of(const std::vector<std::string>& ranked) {
  std::string s;
  for (size_t i = 0; i < ranked.size(); ++i) s += b64(ranked[i]) + " " + std::to_string(i) + "\n";
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Vocab, ByteMap) {
  EXPECT_EQ(bytes_to_token_text(" "), "\u0120");
  EXPECT_EQ(bytes_to_token_text("\n"), "\u010A");
  EXPECT_EQ(bytes_to_token_text("a!~"), "a!~");
  EXPECT_EQ(bytes_to_token_text(std::string(1, '\0')), "\u0100");
  EXPECT_EQ(bytes_to_token_text("\xAD"), "\u0143");
  EXPECT_EQ(bytes_to_token_text("\xA0"), "\u0142");
  EXPECT_EQ(bytes_to_token_text("\xFF\xA1"), "\u00FF\u00A1");
  for (int b = 0; b < 256; ++b) {
    std::string s(1, char(b));
    EXPECT_EQ(token_text_to_bytes(bytes_to_token_text(s)), s);
  }
  EXPECT_NE(error_of([] { token_text_to_bytes("a\u0144"); }).find("U+0144"), std::string::npos);
  EXPECT_NE(error_of([] { token_text_to_bytes(" "); }).find("U+0020"), std::string::npos);
}

TEST(Vocab, TiktokenParses) {
  auto ranked = byte_ranks({"ab", " the"});
  EXPECT_EQ(parse_tiktoken_ranks(file_of(ranked), "t.model"), ranked);
  // Any line order, CRLF and blank lines.
  std::string s = "YWI= 256\r\n\r\n" + file_of(byte_ranks()).substr(0);
  EXPECT_EQ(parse_tiktoken_ranks(s, "t.model"), byte_ranks({"ab"}));
}

TEST(Vocab, TiktokenErrorsNameFileAndLine) {
  auto e = [](const std::string& text) { return error_of([&] { parse_tiktoken_ranks(text, "tok.model"); }); };
  EXPECT_EQ(e("YQ== 0\nYg==\n"), "tok.model:2: malformed line 'Yg==': expected '<base64 token> <rank>'");
  EXPECT_EQ(e("YQ== 0\nYg== x1\n"), "tok.model:2: malformed rank 'x1': expected a decimal number");
  EXPECT_EQ(e("YQ== 0\nYg== -1\n"), "tok.model:2: malformed rank '-1': expected a decimal number");
  EXPECT_EQ(e("YQ== 0\nY!== 1\n"), "tok.model:2: malformed token 'Y!==': not valid base64");
  EXPECT_EQ(e("YQ== 0\nYWJ 1\n"), "tok.model:2: malformed token 'YWJ': not valid base64");
  EXPECT_EQ(e("YQ== 0\n 1\n"), "tok.model:2: malformed token '': not valid base64");
  EXPECT_EQ(e("YQ== 0\nYg== 0\n"), "tok.model:2: duplicate rank 0 (first on line 1)");
  EXPECT_EQ(e("YQ== 0\nYQ== 1\n"), "tok.model:2: token 'a' (rank 1) duplicates rank 0 on line 1");
  EXPECT_EQ(e("YQ== 0\nYg== 2\n\n"), "tok.model: rank 1 is missing (ranks must be 0..2 without gaps; rank 2 is on line 2)");
  EXPECT_EQ(e("YQ== 99999999999\n"), "tok.model:1: malformed rank '99999999999': expected a decimal number");
  EXPECT_EQ(e("YQ== 2147483647\n"), "tok.model:1: rank 2147483647 is too large");
  EXPECT_EQ(e("YQ== 0\nYg== 2147483000\n"),
            "tok.model:2: rank 2147483000 leaves a gap: the file has at most 3 entries, so ranks must be below that");
  EXPECT_EQ(e(""), "tok.model: no tokens");
  EXPECT_EQ(error_of([] { read_tiktoken_ranks("/nonexistent/tiktoken.model"); }),
            "/nonexistent/tiktoken.model: cannot open file");
}

TEST(Vocab, MergesFromRanks) {
  // "ab" < "abc" < "bc": "abc" is built as ab + c although bc exists (bc's rank is higher).
  auto ranked = byte_ranks({"ab", "abc", "bc", "xyz"});
  size_t unreachable = 0;
  auto m = merges_from_ranks(ranked, &unreachable);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(m[1], (std::pair<std::string, std::string>{"ab", "c"}));
  EXPECT_EQ(m[2], (std::pair<std::string, std::string>{"b", "c"}));
  EXPECT_EQ(unreachable, 1u);  // "xyz": no pair of its bytes is a token
}

TEST(Vocab, WriteVocabKeys) {
  VocabSpec spec;
  spec.ranked = byte_ranks({" t", " th", "he", " the"});
  spec.specials = {{262, "[BOS]"}, {263, "<|end_of_msg|>"}};
  spec.n_vocab = 266;
  spec.bos_id = 262, spec.eos_id = 263;
  spec.chat_template = "{{ x }}";
  spec.add_bos = false;
  gguf::Metadata meta;
  write_vocab(spec, meta);
  EXPECT_EQ(meta.get_str("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(meta.get_str("tokenizer.ggml.pre"), "kimi-k2");
  const auto& tokens = std::get<std::vector<std::string>>(meta.get_array("tokenizer.ggml.tokens").data);
  ASSERT_EQ(tokens.size(), 266u);
  EXPECT_EQ(tokens[32], "\u0120");
  EXPECT_EQ(tokens[259], "\u0120the");
  EXPECT_EQ(tokens[256], "\u0120t");
  EXPECT_EQ(tokens[262], "[BOS]");
  EXPECT_EQ(tokens[264], "<|reserved_token_264|>");
  const auto& types = std::get<std::vector<int32_t>>(meta.get_array("tokenizer.ggml.token_type").data);
  EXPECT_EQ(types[0], 1);
  EXPECT_EQ(types[259], 1);
  EXPECT_EQ(types[262], 3);
  EXPECT_EQ(types[265], 3);
  const auto& merges = std::get<std::vector<std::string>>(meta.get_array("tokenizer.ggml.merges").data);
  EXPECT_EQ(merges, (std::vector<std::string>{"\u0120 t", "\u0120t h", "h e", "\u0120th e"}));
  EXPECT_EQ(meta.get_u32("tokenizer.ggml.bos_token_id"), 262u);
  EXPECT_EQ(meta.get_u32("tokenizer.ggml.eos_token_id"), 263u);
  EXPECT_FALSE(meta.has("tokenizer.ggml.padding_token_id"));
  EXPECT_FALSE(meta.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(meta.has("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(meta.get_str("tokenizer.chat_template"), "{{ x }}");
}

TEST(Vocab, WriteVocabRejectsInconsistentSpecs) {
  auto e = [](VocabSpec spec) {
    gguf::Metadata m;
    return error_of([&] { write_vocab(spec, m); });
  };
  VocabSpec s;
  s.ranked = byte_ranks();
  s.specials = {{10, "[X]"}};
  EXPECT_EQ(e(s), "vocabulary: special token '[X]' has id 10 outside [256, 256)");
  s.specials = {{256, "[X]"}, {256, "[Y]"}};
  EXPECT_EQ(e(s), "vocabulary: special id 256 is named twice ('[X]', '[Y]')");
  s.specials = {{256, "[X]"}, {257, "[X]"}};
  EXPECT_EQ(e(s), "vocabulary: special tokens 256 and 257 have the same text '[X]'");
  s.specials = {};
  s.ranked.push_back("a");
  EXPECT_EQ(e(s), "vocabulary: ranked tokens 97 and 256 have the same bytes 'a'");
  s.ranked = byte_ranks();
  s.n_vocab = 100;
  EXPECT_EQ(e(s), "vocabulary: n_vocab 100 is smaller than the 256 ranked tokens");
  s.n_vocab = 0;
  s.eos_id = 300;
  EXPECT_EQ(e(s), "vocabulary: special id 300 outside [0, 256)");
}

TEST(Vocab, TiktokenWithTokenizerConfig) {
  const std::string dir = ::testing::TempDir();
  const std::string model = dir + "/k3_vocab_test.tiktoken", cfg = dir + "/k3_vocab_test_config.json";
  std::ofstream(model) << file_of(byte_ranks({"ab"}));
  std::ofstream(cfg) << R"({"added_tokens_decoder": {"257": {"content": "[BOS]", "special": true},
      "258": {"content": "[EOS]", "special": true}, "260": {"content": "[PAD]", "special": true}},
    "bos_token": "[BOS]", "eos_token": {"content": "[EOS]"}, "pad_token": "[PAD]", "add_bos_token": true,
    "chat_template": "T"})";
  VocabSpec spec = vocab_from_tiktoken(model, cfg, 262);
  EXPECT_EQ(spec.ranked.size(), 257u);
  ASSERT_EQ(spec.specials.size(), 3u);
  EXPECT_EQ(spec.specials[0].id, 257);
  EXPECT_EQ(spec.specials[0].text, "[BOS]");
  EXPECT_EQ(spec.bos_id, 257);
  EXPECT_EQ(spec.eos_id, 258);
  EXPECT_EQ(spec.pad_id, 260);
  EXPECT_EQ(spec.add_bos, true);
  EXPECT_EQ(spec.chat_template, "T");
  gguf::Metadata meta;
  write_vocab(spec, meta);
  EXPECT_EQ(std::get<std::vector<std::string>>(meta.get_array("tokenizer.ggml.tokens").data)[259], "<|reserved_token_259|>");

  std::ofstream(cfg) << R"({"added_tokens_decoder": {"12": {"content": "[X]"}}})";
  EXPECT_EQ(error_of([&] { vocab_from_tiktoken(model, cfg); }), cfg + ": added token 12 '[X]' collides with ranked token 12");
  std::ofstream(cfg) << R"({"bos_token": "[NOPE]"})";
  EXPECT_EQ(error_of([&] { vocab_from_tiktoken(model, cfg); }), cfg + ": bos_token '[NOPE]' is not an added token");
  std::ofstream(cfg) << R"({"added_tokens_decoder": {"x": {"content": "[X]"}}})";
  EXPECT_EQ(error_of([&] { vocab_from_tiktoken(model, cfg); }), cfg + ": added_tokens_decoder key 'x' is not a token id");
  std::ofstream(cfg) << "{";
  EXPECT_NE(error_of([&] { vocab_from_tiktoken(model, cfg); }).find(cfg + ": invalid JSON"), std::string::npos);
  std::remove(model.c_str());
  std::remove(cfg.c_str());
}
