// Parity of k3's tokenizer with llama.cpp (node-llama-cpp) and js-tiktoken on the corpus
// (tests/tokenizer/corpus.json), rank-based vs merge-list BPE, round trips and streaming decode.
// Reference data comes from the tokenizer_refs fixture (make_refs.sh) in $K3_TOKDATA.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

using namespace k3;
using namespace k3::tok;
using json = nlohmann::json;

namespace {

std::string env(const char* k, const char* fallback) {
  const char* v = std::getenv(k);
  return v ? v : fallback;
}
#ifndef K3_TOKDATA_DEFAULT
#define K3_TOKDATA_DEFAULT ""
#define K3_SOURCE_DIR_DEFAULT ""
#endif
std::string data_dir() { return env("K3_TOKDATA", K3_TOKDATA_DEFAULT); }

json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return json::parse(f);
}

std::string b64decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    int v = val(c);
    if (v < 0) continue;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

struct Entry {
  std::string cat, bytes;
  bool valid;
};

const std::vector<Entry>& corpus() {
  static std::vector<Entry> c = [] {
    std::vector<Entry> v;
    for (const json& e : read_json(env("K3_SOURCE_DIR", K3_SOURCE_DIR_DEFAULT) + "/tests/tokenizer/corpus.json")) {
      Entry x;
      x.cat = e["cat"];
      x.bytes = e.contains("text") ? e["text"].get<std::string>() : b64decode(e["b64"].get<std::string>());
      x.valid = utf8_valid_prefix(x.bytes) == x.bytes.size();
      v.push_back(std::move(x));
    }
    return v;
  }();
  return c;
}

std::string shown(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 120)) {
    if (c >= 0x20 && c != 0x7F && c != '\\')
      out += static_cast<char>(c);
    else
      out += strprintf("\\x%02x", c);
  }
  return s.size() > 120 ? out + "..." : out;
}

std::string ids_str(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 40; ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return v.size() > 40 ? s + ",..." : s;
}

// Compares k3's encodings of the whole corpus with reference id lists; reports per category.
void compare(const char* what, const std::vector<std::vector<int32_t>>& ref,
             const std::function<std::vector<int32_t>(const std::string&)>& enc) {
  const auto& c = corpus();
  ASSERT_EQ(ref.size(), c.size()) << what << ": reference has a different number of strings";
  std::map<std::string, std::pair<int, int>> per_cat;  // mismatches, total
  int bad = 0;
  size_t tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < c.size(); ++i) {
    std::vector<int32_t> got = enc(c[i].bytes);
    tokens += got.size();
    auto& pc = per_cat[c[i].cat];
    ++pc.second;
    if (got == ref[i]) continue;
    ++pc.first;
    if (++bad <= 5)
      ADD_FAILURE() << what << ": string " << i << " (" << c[i].cat << ") '" << shown(c[i].bytes) << "'\n  k3:  ["
                    << ids_str(got) << "]\n  ref: [" << ids_str(ref[i]) << "]";
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::string summary;
  for (auto& [cat, p] : per_cat) summary += strprintf(" %s %d/%d", cat.c_str(), p.second - p.first, p.second);
  std::printf("[ parity   ] %s: %zu/%zu identical, %zu tokens, %.0f ms;%s\n", what, c.size() - bad, c.size(), tokens, ms,
              summary.c_str());
  EXPECT_EQ(bad, 0) << what;
}

std::vector<std::vector<int32_t>> ids_of(const json& j) { return j.get<std::vector<std::vector<int32_t>>>(); }

struct Loaded {
  gguf::Model model;
  std::unique_ptr<Tokenizer> tok;
};
Loaded load_gguf(const std::string& enc, const Tokenizer::Options& opt = {}) {
  gguf::Model m = gguf::Model::open(data_dir() + "/" + enc + "_kimi.gguf");
  auto t = Tokenizer::from_metadata(m.meta(), opt);
  return {std::move(m), std::move(t)};
}

std::unique_ptr<Tokenizer> load_ranks(const std::string& enc) {
  std::vector<SpecialToken> specials;
  const json j = read_json(data_dir() + "/" + enc + "_base.specials.json");
  for (auto& [text, id] : j.items()) specials.push_back({id.get<int32_t>(), text});
  return Tokenizer::from_ranks(read_tiktoken_ranks(data_dir() + "/" + enc + "_base.tiktoken"), specials, enc + "_base");
}

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(data_dir().empty()) << "K3_TOKDATA not set (ctest sets it)";
  }
};

}  // namespace

TEST_P(Parity, LlamaCppKimiK2Plain) {
  auto g = load_gguf(GetParam());
  EXPECT_STREQ(g.tok->pre_name(), "kimi-k2");
  compare(("llama.cpp " + GetParam() + " kimi-k2 plain").c_str(),
          ids_of(read_json(data_dir() + "/llama_" + GetParam() + "_plain.json")),
          [&](const std::string& s) { return g.tok->encode(s, false); });
}

TEST_P(Parity, LlamaCppKimiK2Special) {
  auto g = load_gguf(GetParam());
  compare(("llama.cpp " + GetParam() + " kimi-k2 special").c_str(),
          ids_of(read_json(data_dir() + "/llama_" + GetParam() + "_special.json")),
          [&](const std::string& s) { return g.tok->encode(s, true); });
}

TEST_P(Parity, TiktokenPlain) {
  auto t = load_ranks(GetParam());
  compare(("js-tiktoken " + GetParam() + "_base plain").c_str(),
          ids_of(read_json(data_dir() + "/tiktoken_" + GetParam() + "_base.json")["plain"]),
          [&](const std::string& s) { return t->encode(s, false); });
}

TEST_P(Parity, TiktokenSpecial) {
  auto t = load_ranks(GetParam());
  compare(("js-tiktoken " + GetParam() + "_base special").c_str(),
          ids_of(read_json(data_dir() + "/tiktoken_" + GetParam() + "_base.json")["special"]),
          [&](const std::string& s) { return t->encode(s, true); });
}

// Merge-list BPE over the reconstructed merges (GGUF) vs rank BPE (tiktoken), same pattern.
TEST_P(Parity, MergeListEqualsRankBpeOnCorpus) {
  auto g = load_gguf(GetParam(), {GetParam() + "_base"});
  auto t = load_ranks(GetParam());
  std::vector<std::vector<int32_t>> ref;
  for (const auto& e : corpus()) ref.push_back(t->encode(e.bytes, false));
  compare(("merge-list vs rank BPE " + GetParam()).c_str(), ref, [&](const std::string& s) { return g.tok->encode(s, false); });
}

TEST_P(Parity, MergeListBpeReachesEveryToken) {
  auto ranked = read_tiktoken_ranks(data_dir() + "/" + GetParam() + "_base.tiktoken");
  size_t unreachable = 99;
  auto pairs = merges_from_ranks(ranked, &unreachable);
  EXPECT_EQ(unreachable, 0u);
  EXPECT_EQ(pairs.size(), ranked.size() - 256);
  std::vector<std::string> texts, merges;
  for (auto& r : ranked) texts.push_back(bytes_to_token_text(r));
  for (auto& [l, r] : pairs) merges.push_back(bytes_to_token_text(l) + " " + bytes_to_token_text(r));
  MergeBpe bpe(texts, merges);
  size_t bad = 0;
  std::vector<int32_t> out;
  for (size_t id = 0; id < ranked.size(); ++id) {
    out.clear();
    bpe.encode(ranked[id], out);
    if (out != std::vector<int32_t>{static_cast<int32_t>(id)} && ++bad <= 5)
      ADD_FAILURE() << "token " << id << " '" << shown(ranked[id]) << "' encodes to [" << ids_str(out) << "]";
  }
  std::printf("[ parity   ] %s: %zu merges; %zu/%zu tokens encode to themselves\n", GetParam().c_str(), pairs.size(),
              ranked.size() - bad, ranked.size());
  EXPECT_EQ(bad, 0u);

  // Random multi-token byte strings, encoded as one piece by both algorithms.
  RankBpe rank(ranked);
  std::mt19937 rng(42);
  const int n = 50000;
  int diff = 0;
  std::vector<int32_t> a, b;
  for (int i = 0; i < n; ++i) {
    std::string s;
    int k = 2 + rng() % 5;
    for (int j = 0; j < k; ++j) s += ranked[rng() % ranked.size()];
    a.clear(), b.clear();
    bpe.encode(s, a);
    rank.encode(s, b);
    if (a != b && ++diff <= 5) ADD_FAILURE() << "'" << shown(s) << "': merge [" << ids_str(a) << "] rank [" << ids_str(b) << "]";
  }
  std::printf("[ parity   ] %s: %d/%d random multi-token byte strings agree\n", GetParam().c_str(), n - diff, n);
  EXPECT_EQ(diff, 0);
}

TEST_P(Parity, RoundTripAndStreaming) {
  auto g = load_gguf(GetParam());
  size_t n_valid = 0, n_stream = 0;
  for (const auto& e : corpus()) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids = g.tok->encode(e.bytes, special);
      std::string once = g.tok->decode(ids, true);
      if (e.valid) {
        EXPECT_EQ(once, e.bytes) << "round trip (special=" << special << ") of '" << shown(e.bytes) << "'";
        ++n_valid;
      } else {
        EXPECT_EQ(once, utf8_sanitize(e.bytes)) << "invalid UTF-8 is encoded as its replacement";
      }
      for (bool render : {false, true}) {
        StreamDecoder sd(*g.tok, render);
        std::string streamed;
        for (int32_t id : ids) streamed += sd.push(id);
        streamed += sd.flush();
        EXPECT_EQ(streamed, g.tok->decode(ids, render));
        ++n_stream;
      }
    }
  }
  // Arbitrary id sequences: byte tokens that split characters, specials, anything.
  std::mt19937 rng(7);
  const int32_t V = g.tok->n_vocab();
  for (int i = 0; i < 3000; ++i) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (auto& id : ids) id = (rng() % 4 == 0) ? static_cast<int32_t>(rng() % 256) : static_cast<int32_t>(rng() % V);
    for (bool render : {false, true}) {
      StreamDecoder sd(*g.tok, render);
      std::string streamed;
      std::vector<size_t> cuts;
      for (int32_t id : ids) {
        streamed += sd.push(id);
        cuts.push_back(streamed.size());
      }
      // No chunk ends inside a well-formed character of the whole text.
      const std::string full = g.tok->decode(ids, render);
      std::vector<bool> inside(full.size() + 1, false);
      for (size_t k = 0; k < full.size();) {
        size_t j = k;
        uint32_t cp = utf8_next(full, j);
        bool well_formed = cp != 0xFFFD || full.compare(k, 3, "\xEF\xBF\xBD") == 0;
        for (size_t q = k + 1; well_formed && q < j; ++q) inside[q] = true;
        k = j;
      }
      for (size_t cut : cuts) EXPECT_FALSE(inside[cut]) << "chunk boundary inside a character at byte " << cut;
      streamed += sd.flush();
      EXPECT_EQ(streamed, g.tok->decode(ids, render));
      ++n_stream;
    }
  }
  std::printf("[ parity   ] %s: %zu round trips, %zu streamed decodes\n", GetParam().c_str(), n_valid, n_stream);
}

INSTANTIATE_TEST_SUITE_P(Vocab, Parity, ::testing::Values("cl100k", "o200k"));
