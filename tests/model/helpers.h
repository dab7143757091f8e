// Shared helpers of the model tests: temporary files, synthetic models, running commands, the
// llama.cpp harness (tests/node/llama.mjs), logits comparison.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/synthetic.h"

namespace k3::test {

// A fresh directory under $TMPDIR, removed at exit.
std::string temp_dir();
std::string temp_path(const std::string& name);

// Writes a synthetic model for `o` into the temp dir and returns its path.
std::string make_model(const model::SynthOptions& o, const std::string& name);

// The configurations the parity tests use (see docs/model.md).
model::SynthOptions config_a(float rms_eps);  // 17 layers, AttnRes block 3, MLA/KDA ending in two MLA, f32
model::SynthOptions config_b(float rms_eps);  // no q-LoRA, no latent MoE, softplus KDA gate
model::SynthOptions config_c(float rms_eps);  // f16 matmuls + MXFP4 experts
model::SynthOptions config_d(float rms_eps);  // q8_0 (attn_k_b/attn_v_b bf16)
// All four by name, for tests parameterised over them.
struct NamedConfig {
  const char* name;
  model::SynthOptions (*make)(float);
};
inline const NamedConfig kConfigs[] = {{"a", config_a}, {"b", config_b}, {"c", config_c}, {"d", config_d}};

// Runs a shell command; returns its exit status and captures stdout (+ stderr if merge).
int run_cmd(const std::string& cmd, std::string* out, bool merge_stderr = true);

// Path of tests/node/llama.mjs; fails the test (not skip) if node or the harness is missing.
std::string llama_harness();

struct Rows {
  int32_t n_vocab = 0;
  std::vector<std::vector<float>> rows;
};
// llama.cpp's logits for every position (mode "batch" or "incremental").
Rows llama_logits(const std::string& model, const std::vector<int32_t>& ids, const std::string& mode);
// llama.cpp's greedy continuation.
std::vector<int32_t> llama_generate(const std::string& model, const std::vector<int32_t>& ids, int n);

// k3's logits, in-process.
Rows k3_logits(const model::Model& m, const std::vector<int32_t>& ids, int64_t chunk, int threads = 1,
               model::F16Rule rule = model::default_f16_rule());
// k3's greedy continuation (prompt in one batch, then one token per step).
std::vector<int32_t> k3_generate(const model::Model& m, const std::vector<int32_t>& ids, int n, int threads = 1);

double max_abs_diff(const Rows& a, const Rows& b);
double max_abs(const Rows& a);
// How two sets of logit rows agree as distributions: mean over positions of KL(softmax(p) ||
// softmax(q)) and the fraction of positions with the same argmax (INFINITY / 0 on a shape mismatch).
struct Agreement {
  double mean_kl = INFINITY;
  double top1 = 0;
};
Agreement agreement(const Rows& p, const Rows& q);

// A prompt of n ids spread over the vocabulary (deterministic).
std::vector<int32_t> prompt_ids(int n, int32_t n_vocab, uint64_t seed = 7);

}  // namespace k3::test
