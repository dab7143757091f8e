// Quality of a (quantized) model on a text: perplexity, and the KL divergence of its next-token
// distributions from a reference model's, whose log-probabilities are saved to a file first.
//
// Scoring follows llama-perplexity: the tokens are cut into chunks of n_ctx; each chunk is run
// from an empty state and the tokens after its first half are scored (position j predicts token
// j+1 for j in [n_ctx/2, n_ctx-1)), so every scored token has at least n_ctx/2 of context.
//
// KL base file (little-endian):
//   "K3KLBASE" · u32 version (1) · u32 n_vocab · u32 n_ctx · u32 first · u32 n_chunks ·
//   i32 tokens[n_chunks·n_ctx] · f32 log_probs[n_chunks][n_ctx-1-first][n_vocab]
// (the reference's log-softmax for every scored position).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3::model {
class Model;
class ExpertSource;
}

namespace k3::quant {

struct PplOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;
  int64_t max_chunks = 0;  // 0: every full chunk of the text
  int threads = 1;
  model::ExpertSource* experts = nullptr;  // routed experts streamed from disk (null: mapped)
};

// Per scored token statistics against the reference distribution.
struct KlStats {
  std::vector<double> kld;  // KL(base || model) per token, nats
  std::vector<double> dp;   // p_model(actual token) - p_base(actual token)
  int64_t same_top = 0;     // argmax agreement
  double nll_base = 0;      // sum of the base's -log p(actual token)
  void add(const float* base_logp, const float* logp, int64_t n_vocab, int32_t actual);
  nlohmann::json to_json() const;
  void print(FILE* f) const;
};

struct PplResult {
  int64_t n_ctx = 0, n_chunks = 0, n_tokens = 0;  // n_tokens: scored
  double nll = 0, nll2 = 0;                       // sums of -log p and its square
  std::vector<double> chunk_ppl;                  // running perplexity after each chunk
  double ppl() const;
  double ppl_stderr() const;  // from the standard error of the mean NLL
  nlohmann::json to_json() const;
};

// Reference log-probabilities (the KL base file above).
class KlBase {
 public:
  // Opens for writing (a temporary file, renamed by finish()).
  static std::unique_ptr<KlBase> create(const std::string& path, int64_t n_vocab, int64_t n_ctx, int64_t first,
                                        const std::vector<int32_t>& tokens, int64_t n_chunks);
  // Opens for reading; checks that it was made from the same tokens, context and vocabulary.
  static std::unique_ptr<KlBase> open(const std::string& path, int64_t n_vocab, int64_t n_ctx,
                                      const std::vector<int32_t>& tokens, int64_t n_chunks);
  ~KlBase();
  void write_rows(const float* logp, int64_t rows);
  void read_rows(float* logp, int64_t rows);
  void finish();

 private:
  KlBase() = default;
  std::string path_, tmp_;
  FILE* f_ = nullptr;
  int64_t n_vocab_ = 0;
  bool writing_ = false, finished_ = false;
};

// Log-softmax of one row (sum of exponentials in double).
void log_softmax(const float* logits, float* out, int64_t n);

// Scores `tokens` with m. save: also writes the log-probabilities as a KL base; base: compares with
// one (kl receives the statistics). progress(chunk, n_chunks, running ppl) after each chunk.
PplResult perplexity(const model::Model& m, const std::vector<int32_t>& tokens, const PplOptions& o, KlBase* save,
                     KlBase* base, KlStats* kl, const std::function<void(int64_t, int64_t, double)>& progress = nullptr);

// Full chunks the text gives (errors if none).
int64_t count_chunks(int64_t n_tokens, const PplOptions& o);

}  // namespace k3::quant
