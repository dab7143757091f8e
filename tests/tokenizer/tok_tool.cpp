// Test helper: builds the GGUF vocabularies the parity tests hand to llama.cpp, and times k3's
// tokenizer for the throughput benchmark (bench.sh).
//   tok_tool make-gguf RANKS.tiktoken OUT.gguf [--pre NAME] [--k3-specials]
//   tok_tool bench VOCAB.gguf TEXT [--reps N] [--special] [--pre NAME]
//   tok_tool bench-split TEXT [--reps N]   pre-tokenizer only: k3's class-mapped byte patterns
//                                          vs the same regexes in PCRE2 UTF+UCP mode
// The file is a vocab-only `llama` GGUF (minimal hyperparameters, no tensors) that llama.cpp
// loads with vocab_only. --k3-specials adds the 256 K3 special ids after the ranked tokens, named
// as in conversion.md §5.3 (the rest <|reserved_token_N|>), with bos/eos/pad as in §5.6.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "ucp_reference.h"

using namespace k3;

static const std::pair<int, const char*> kK3Specials[] = {
    {163584, "[BOS]"}, {163585, "[EOS]"}, {163586, "<|end_of_msg|>"}, {163587, "<|open|>"}, {163588, "<|close|>"},
    {163589, "<|sep|>"}, {163590, "[start_header_id]"}, {163591, "[end_header_id]"}, {163593, "[EOT]"},
    {163602, "<|media_begin|>"}, {163603, "<|media_content|>"}, {163604, "<|media_end|>"}, {163605, "<|media_pad|>"},
    {163649, "<osagent_mode>"}, {163838, "[UNK]"}, {163839, "[PAD]"}};

// Encodes TEXT reps times (after one warm-up run) and prints one JSON line with the best and
// median wall time.
static int bench(int argc, char** argv) {
  int reps = 5;
  bool special = false;
  tok::Tokenizer::Options opt;
  for (int i = 4; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--special"))
      special = true;
    else if (!std::strcmp(argv[i], "--pre") && i + 1 < argc)
      opt.pre = argv[++i];
    else
      fail("unknown option '%s'", argv[i]);
  }
  auto t_load = std::chrono::steady_clock::now();
  auto tok = tok::Tokenizer::from_file(argv[2], "", opt);
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::ifstream f(argv[3], std::ios::binary);
  if (!f) fail("%s: cannot open file", argv[3]);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  size_t n_tokens = tok->encode(text, special).size();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = tok->encode(text, special).size();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (n != n_tokens) fail("token count changed between runs");
  }
  std::sort(times.begin(), times.end());
  std::printf("{\"engine\":\"k3\",\"pre\":\"%s\",\"bytes\":%zu,\"tokens\":%zu,\"load_s\":%.3f,\"best_s\":%.4f,"
              "\"median_s\":%.4f,\"mb_per_s\":%.2f}\n",
              tok->pre_name(), text.size(), n_tokens, load_s, times[0], times[times.size() / 2],
              text.size() / 1e6 / times[times.size() / 2]);
  return 0;
}

static int bench_split(int argc, char** argv) {
  int reps = 5;
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else
      fail("unknown option '%s'", argv[i]);
  }
  std::ifstream f(argv[2], std::ios::binary);
  if (!f) fail("%s: cannot open file", argv[2]);
  const std::string text = tok::utf8_sanitize(std::string((std::istreambuf_iterator<char>(f)), {}));
  auto best = [&](auto&& fn) {
    double b = 1e9;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      b = std::min(b, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return b;
  };
  for (tok::PreType t : {tok::PreType::kimi_k2, tok::PreType::kimi_k2_regex, tok::PreType::cl100k_base, tok::PreType::o200k_base}) {
    tok::PreTokenizer p(t);
    tok::testref::UcpRegex ucp(tok::testref::ucp_pattern(t));
    std::vector<tok::Span> a, b;
    double ta = best([&] { a.clear(); p.split(text, a); });
    double tb = best([&] { b.clear(); ucp.split(text, b); });
    std::printf("{\"pre\":\"%s\",\"bytes\":%zu,\"pieces\":%zu,\"k3_class_mapped_mb_s\":%.1f,\"pcre2_utf_ucp_mb_s\":%.1f}\n",
                tok::pre_type_name(t), text.size(), a.size(), text.size() / 1e6 / ta, text.size() / 1e6 / tb);
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc >= 3 && !std::strcmp(argv[1], "bench-split")) return bench_split(argc, argv);
    if (argc >= 4 && !std::strcmp(argv[1], "bench")) return bench(argc, argv);
    if (argc < 4 || std::strcmp(argv[1], "make-gguf") != 0) {
      std::fprintf(stderr,
                   "usage: tok_tool make-gguf RANKS.tiktoken OUT.gguf [--pre NAME] [--k3-specials]\n"
                   "       tok_tool bench VOCAB TEXT [--reps N] [--special] [--pre NAME]\n");
      return 2;
    }
    tok::VocabSpec spec;
    spec.ranked = tok::read_tiktoken_ranks(argv[2]);
    for (int i = 4; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--pre") && i + 1 < argc) {
        spec.pre = argv[++i];
      } else if (!std::strcmp(argv[i], "--k3-specials")) {
        const int32_t base = static_cast<int32_t>(spec.ranked.size());
        for (auto [id, name] : kK3Specials) spec.specials.push_back({base + id - 163584, name});
        spec.n_vocab = base + 256;
        spec.bos_id = base, spec.eos_id = base + 2, spec.pad_id = base + 255;
      } else {
        fail("unknown option '%s'", argv[i]);
      }
    }
    gguf::Metadata meta;
    meta.set("general.architecture", gguf::Value::str("llama"));
    meta.set("general.name", gguf::Value::str("k3 tokenizer test vocabulary"));
    meta.set("llama.context_length", gguf::Value::u32(4096));
    meta.set("llama.embedding_length", gguf::Value::u32(64));
    meta.set("llama.block_count", gguf::Value::u32(1));
    meta.set("llama.feed_forward_length", gguf::Value::u32(128));
    meta.set("llama.attention.head_count", gguf::Value::u32(4));
    meta.set("llama.attention.head_count_kv", gguf::Value::u32(4));
    meta.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
    meta.set("llama.rope.dimension_count", gguf::Value::u32(16));
    tok::write_vocab(spec, meta);
    gguf::Writer w(argv[3], std::move(meta), {});
    w.finish();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tok_tool: %s\n", e.what());
    return 1;
  }
}
