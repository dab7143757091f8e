// Shared helpers of the quantizer tests: the synthetic model they quantize,
// and running the k3 binary / node.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "gguf/writer.h"
#include "model/synthetic.h"
#include "quantize/imatrix.h"
#include "support/temp_dir.h"

namespace k3::qtest {

inline std::string env_or(const char* k, const char* def) {
  const char* v = std::getenv(k);
  return v && *v ? v : def;
}
inline std::string source_dir() { return env_or("K3_SOURCE_DIR", "."); }
inline std::string k3_bin() { return env_or("K3_BIN_DIR", ".") + "/k3"; }

using k3::test::TempDir;

// The synthetic Kimi-K3 the tests quantize: the real layer structure (3 KDA + 2 MLA layers, a
// dense first layer, latent MoE with shared experts, AttnRes), with widths that are multiples of
// 256 where K3 has them (so K-quants apply) and 64 for attn_k_b (a fallback, like K3's 128).
inline model::SynthOptions synth_options(GgmlType type = GgmlType::BF16, GgmlType experts = GgmlType::MXFP4,
                                         uint64_t seed = 7) {
  model::SynthOptions o;
  o.n_layer = 5, o.n_embd = 256, o.n_head = 4, o.head_dim = 64;
  o.q_lora = 256, o.kv_lora = 256, o.qk_nope = 64, o.qk_rope = 32, o.v_head = 64;
  o.n_expert = 8, o.n_expert_used = 2, o.n_ff_exp = 256, o.latent = 256, o.n_shared = 1;
  o.n_ff = 512, o.n_dense = 1, o.attn_res_block = 4, o.n_vocab = 768;
  o.type = type, o.expert_type = experts, o.seed = seed;
  o.name = "k3-quantize-test";
  return o;
}

// The model of docs/quantization.md: synth_options() structure (F32 unless told), with RMS-norm
// gains drawn log-normal (sigma, mean one) instead of ~1, so that the inputs of the matrix products
// have columns of very different scale as in trained models; without that, every column of a
// random model matters about equally and an importance matrix has nothing to find.
inline void write_eval_model(const std::string& out, double sigma, model::SynthOptions o) {
  o.name = "k3-quantize-eval";
  const std::string tmp = out + ".synth";
  model::write_synthetic(tmp, o);
  {
    const gguf::Model in = gguf::Model::open(tmp);
    std::vector<gguf::TensorSpec> specs;
    for (const auto* t : in.tensors()) specs.push_back({t->name, t->type, std::vector<int64_t>(t->ne, t->ne + t->n_dims)});
    gguf::Writer w(out, in.meta(), specs);
    std::mt19937 g(static_cast<uint32_t>(o.seed));
    std::lognormal_distribution<float> gain(0.f, static_cast<float>(sigma));
    const float mean = std::exp(static_cast<float>(sigma * sigma / 2));
    for (const auto* t : in.tensors()) {
      const std::string& n = t->name;
      const bool norm = n.find("attn_norm.weight") != std::string::npos || n.find("ffn_norm.weight") != std::string::npos ||
                        n.find("_a_norm.weight") != std::string::npos || n.find("routed_norm.weight") != std::string::npos;
      if (!norm || t->type != GgmlType::F32) {
        w.write(t->data, t->nbytes);
        continue;
      }
      std::vector<float> v(static_cast<size_t>(t->nelements()));
      std::memcpy(v.data(), t->data, t->nbytes);
      for (float& x : v) x *= gain(g) / mean;
      w.write(v.data(), t->nbytes);
    }
    w.finish();
  }
  std::filesystem::remove(tmp);
}

// An importance matrix for every matrix product of m: random positive column sums for each 2-D or
// 3-D weight but token_embd (looked up, not multiplied, so no imatrix covers it). The lattice types
// ggml writes only with one (IQ2_XXS, IQ2_XS, IQ1_S) quantize with it in the tests.
inline quant::Imatrix synthetic_imatrix(const gguf::Model& m, uint32_t seed = 3) {
  quant::Imatrix im;
  im.datasets = {"synthetic"};
  im.chunk_count = 1, im.chunk_size = 1;
  im.path = "synthetic.imatrix";
  std::mt19937 g(seed);
  std::exponential_distribution<double> ed(1.0);
  for (const auto* t : m.tensors()) {
    if (t->n_dims < 2 || t->name == "token_embd.weight") continue;
    const int64_t n_mat = t->n_dims >= 3 ? t->ne[2] * t->ne[3] : 1;
    quant::ImatrixEntry e{t->ne[0], n_mat, std::vector<double>(static_cast<size_t>(t->ne[0] * n_mat)),
                          std::vector<double>(static_cast<size_t>(n_mat), 10.0)};
    for (double& v : e.sums) v = 10.0 * ed(g);
    im.entries[t->name] = std::move(e);
  }
  return im;
}

struct RunResult {
  int status = -1;
  std::string out;  // stdout and stderr
};

// Runs a shell command, capturing stdout and stderr together.
inline RunResult run(const std::string& cmd) {
  RunResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline bool have_node() { return run("node --version").status == 0; }

// Deterministic English-like text (calibration and evaluation texts differ by seed).
inline std::string make_text(uint32_t seed, int n_words) {
  static const char* words[] = {
      "the", "model", "reads", "a", "token", "and", "writes", "the", "next", "one", "while", "experts", "route",
      "each", "hidden", "state", "through", "latent", "layers", "of", "attention", "with", "memory", "that", "keeps",
      "recent", "context", "in", "order", "to", "predict", "words", "quickly", "on", "small", "machines", "when",
      "weights", "are", "quantized", "into", "fewer", "bits", "per", "value", "so", "files", "shrink", "but",
      "quality", "should", "stay", "close", "reference", "numbers", "show", "how", "much", "is", "lost", "."};
  constexpr size_t n = sizeof(words) / sizeof(words[0]);
  uint64_t s = seed * 2654435761ull + 1;
  std::string t;
  for (int i = 0; i < n_words; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    // a skewed choice, so some words are much more frequent than others
    const size_t k = static_cast<size_t>(((s >> 33) % 1000) * ((s >> 13) % 1000) / 1000 % n);
    t += words[k];
    t += (i % 17 == 16) ? "\n" : " ";
  }
  return t;
}

inline void write_file(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

}  // namespace k3::qtest
