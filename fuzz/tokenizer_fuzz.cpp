// libFuzzer target for the tokenizer. The first byte picks what the rest is:
//   0, 1  text: encoded by every pre-tokenizer (merge-list BPE) and by rank BPE, with and without
//         special parsing. Checks: decode(encode(s)) == s with ill-formed UTF-8 replaced, streaming
//         decode == one-shot decode, pieces cover the text, kimi-k2 == the rules of §5.5.
//         Bytes >= 0xF8 (never in UTF-8) are replaced by special-token texts first.
//   2     a tiktoken.model file: parsed (a clean k3::Error or a vocabulary, which is then built,
//         loaded and used).
//   3     token ids (int32 little endian) to decode, and a token text to map back to bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "ucp_reference.h"

using namespace k3;
using namespace k3::tok;

namespace {

#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "tokenizer_fuzz: check failed: %s\n", #cond); \
      std::abort();                                                     \
    }                                                                   \
  } while (0)

const char* const kSpecials[] = {"[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "[EOT]", "[PAD]"};

VocabSpec spec() {
  VocabSpec s;
  for (int b = 0; b < 256; ++b) s.ranked.push_back(std::string(1, char(b)));
  for (const char* t : {"he", "ll", "hell", "hello", " w", "or", " wor", "ld", " world", "\xE4\xBD", "\xE4\xBD\xA0", " t",
                        "th", " the", "\n\n", "  ", "    ", "12", "123", "'s", "in", "ing", " in"})
    s.ranked.push_back(t);
  const int32_t base = static_cast<int32_t>(s.ranked.size());
  for (int i = 0; i < 8; ++i) s.specials.push_back({base + i, kSpecials[i]});
  s.n_vocab = base + 16;
  s.bos_id = base, s.eos_id = base + 2;
  return s;
}

struct State {
  std::vector<std::unique_ptr<Tokenizer>> toks;
  std::unique_ptr<PreTokenizer> k2;
  State() {
    gguf::Metadata meta;
    VocabSpec s = spec();
    write_vocab(s, meta);
    for (const char* pre : {"kimi-k2", "kimi-k2-regex", "cl100k_base", "o200k_base", "default"})
      toks.push_back(Tokenizer::from_metadata(meta, {pre}));
    toks.push_back(Tokenizer::from_ranks(s.ranked, s.specials, "kimi-k2"));
    k2 = std::make_unique<PreTokenizer>(PreType::kimi_k2);
  }
};

void check_text(const State& st, const std::string& text) {
  const std::string clean = utf8_sanitize(text);
  for (const auto& t : st.toks) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids = t->encode(text, special);
      CHECK(t->decode(ids, true) == clean);
      for (bool render : {false, true}) {
        StreamDecoder sd(*t, render);
        std::string s;
        for (int32_t id : ids) s += sd.push(id);
        s += sd.flush();
        CHECK(s == t->decode(ids, render));
      }
    }
  }
  std::vector<Span> spans;
  st.k2->split(clean, spans);
  uint32_t at = 0;
  std::vector<std::string> pieces;
  for (const Span& sp : spans) {
    CHECK(sp.begin == at && sp.end > sp.begin);
    pieces.emplace_back(clean.substr(sp.begin, sp.end - sp.begin));
    at = sp.end;
  }
  CHECK(at == clean.size());
  CHECK(pieces == testref::kimi_k2_rules(clean));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const State st;
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  const std::string payload(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
    case 1: {
      std::string text;
      for (unsigned char c : payload) {
        if (c >= 0xF8)
          text += kSpecials[c - 0xF8];
        else
          text += static_cast<char>(c);
      }
      check_text(st, text);
      break;
    }
    case 2: {
      std::vector<std::string> ranked;
      try {
        ranked = parse_tiktoken_ranks(payload, "fuzz.tiktoken");
      } catch (const Error&) {
        break;
      }
      if (ranked.size() > 2000) break;
      VocabSpec s;
      s.ranked = std::move(ranked);
      gguf::Metadata meta;
      write_vocab(s, meta);
      auto t = Tokenizer::from_metadata(meta);
      std::vector<int32_t> ids = t->encode(payload, false);
      (void)t->decode(ids, true);
      break;
    }
    case 3: {
      const auto& t = st.toks[0];
      std::vector<int32_t> ids;
      for (size_t i = 0; i + 4 <= payload.size(); i += 4) {
        int32_t v;
        std::memcpy(&v, payload.data() + i, 4);
        ids.push_back(v);
      }
      try {
        StreamDecoder sd(*t, true);
        std::string s;
        for (int32_t id : ids) s += sd.push(id);
        s += sd.flush();
        CHECK(s == t->decode(ids, true));
      } catch (const Error&) {
      }
      try {
        (void)token_text_to_bytes(payload);
      } catch (const Error&) {
      }
      break;
    }
  }
  return 0;
}
