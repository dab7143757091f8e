#include "quantize/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "model/model.h"
#include "tensor/threadpool.h"

namespace k3::quant {

namespace {

constexpr char kMagic[8] = {'K', '3', 'K', 'L', 'B', 'A', 'S', 'E'};
constexpr uint32_t kVersion = 1;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct MeanErr {
  double mean = 0, stderr_ = 0;
};
MeanErr mean_err(const std::vector<double>& v) {
  MeanErr r;
  if (v.empty()) return r;
  double s = 0, s2 = 0;
  for (double x : v) s += x, s2 += x * x;
  const double n = static_cast<double>(v.size());
  r.mean = s / n;
  if (v.size() > 1) r.stderr_ = std::sqrt(std::max(0.0, (s2 / n - r.mean * r.mean) / (n - 1)));
  return r;
}

void write_u32(FILE* f, uint32_t v) {
  if (std::fwrite(&v, 4, 1, f) != 1) fail("KL base: write failed");
}

}  // namespace

void log_softmax(const float* x, float* out, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - mx));
  const float lse = mx + static_cast<float>(std::log(s));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - lse;
}

void KlStats::add(const float* base_logp, const float* logp, int64_t n_vocab, int32_t actual) {
  double k = 0;
  int64_t top_b = 0, top_q = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const double pb = std::exp(static_cast<double>(base_logp[i]));
    k += pb * (static_cast<double>(base_logp[i]) - static_cast<double>(logp[i]));
    if (base_logp[i] > base_logp[top_b]) top_b = i;
    if (logp[i] > logp[top_q]) top_q = i;
  }
  kld.push_back(std::max(0.0, k));
  same_top += top_b == top_q;
  dp.push_back(std::exp(static_cast<double>(logp[actual])) - std::exp(static_cast<double>(base_logp[actual])));
  nll_base -= base_logp[actual];
}

nlohmann::json KlStats::to_json() const {
  const MeanErr k = mean_err(kld), d = mean_err(dp);
  double rms = 0;
  for (double x : dp) rms += x * x;
  rms = dp.empty() ? 0 : std::sqrt(rms / static_cast<double>(dp.size()));
  nlohmann::json j = {{"tokens", kld.size()},
                      {"mean_kld", k.mean},
                      {"mean_kld_stderr", k.stderr_},
                      {"median_kld", percentile(kld, 50)},
                      {"p90_kld", percentile(kld, 90)},
                      {"p99_kld", percentile(kld, 99)},
                      {"max_kld", percentile(kld, 100)},
                      {"top1_agreement", kld.empty() ? 0.0 : static_cast<double>(same_top) / static_cast<double>(kld.size())},
                      {"ppl_base", kld.empty() ? 0.0 : std::exp(nll_base / static_cast<double>(kld.size()))},
                      {"mean_dp", d.mean},
                      {"mean_dp_stderr", d.stderr_},
                      {"rms_dp", rms}};
  nlohmann::json pct = nlohmann::json::object();
  for (double p : {1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0})
    pct[std::to_string(static_cast<int>(p))] = percentile(dp, p);
  j["dp_percentiles"] = pct;
  return j;
}

void KlStats::print(FILE* f) const {
  const nlohmann::json j = to_json();
  std::fprintf(f, "KL divergence over %zu tokens\n", kld.size());
  std::fprintf(f, "  mean KLD      %.6f ± %.6f\n", j["mean_kld"].get<double>(), j["mean_kld_stderr"].get<double>());
  std::fprintf(f, "  median KLD    %.6f\n  90%% KLD       %.6f\n  99%% KLD       %.6f\n  max KLD       %.6f\n",
               j["median_kld"].get<double>(), j["p90_kld"].get<double>(), j["p99_kld"].get<double>(),
               j["max_kld"].get<double>());
  std::fprintf(f, "  top-1 agreement %.3f %%\n", 100 * j["top1_agreement"].get<double>());
  std::fprintf(f, "  PPL(base)     %.4f\n", j["ppl_base"].get<double>());
  std::fprintf(f, "  mean Δp       %+.4f %% ± %.4f %%\n  RMS Δp        %.4f %%\n", 100 * j["mean_dp"].get<double>(),
               100 * j["mean_dp_stderr"].get<double>(), 100 * j["rms_dp"].get<double>());
  for (const char* p : {"1", "5", "10", "25", "50", "75", "90", "95", "99"})
    std::fprintf(f, "  Δp %2s%%        %+.4f %%\n", p, 100 * j["dp_percentiles"][p].get<double>());
}

double PplResult::ppl() const { return n_tokens ? std::exp(nll / static_cast<double>(n_tokens)) : 0.0; }

double PplResult::ppl_stderr() const {
  if (n_tokens < 2) return 0;
  const double n = static_cast<double>(n_tokens), mean = nll / n;
  const double var = std::max(0.0, nll2 / n - mean * mean);
  return ppl() * std::sqrt(var / (n - 1));
}

nlohmann::json PplResult::to_json() const {
  return {{"n_ctx", n_ctx}, {"chunks", n_chunks}, {"tokens", n_tokens}, {"ppl", ppl()},
          {"ppl_stderr", ppl_stderr()}, {"mean_nll", n_tokens ? nll / static_cast<double>(n_tokens) : 0.0},
          {"chunk_ppl", chunk_ppl}};
}

// ---- KL base file ----

std::unique_ptr<KlBase> KlBase::create(const std::string& path, int64_t n_vocab, int64_t n_ctx, int64_t first,
                                       const std::vector<int32_t>& tokens, int64_t n_chunks) {
  std::unique_ptr<KlBase> k(new KlBase());
  k->path_ = path;
  k->tmp_ = path + ".tmp";
  k->n_vocab_ = n_vocab;
  k->writing_ = true;
  k->f_ = std::fopen(k->tmp_.c_str(), "wb");
  if (!k->f_) fail("cannot create KL base '%s': %s", k->tmp_.c_str(), std::strerror(errno));
  std::fwrite(kMagic, 1, 8, k->f_);
  write_u32(k->f_, kVersion);
  write_u32(k->f_, static_cast<uint32_t>(n_vocab));
  write_u32(k->f_, static_cast<uint32_t>(n_ctx));
  write_u32(k->f_, static_cast<uint32_t>(first));
  write_u32(k->f_, static_cast<uint32_t>(n_chunks));
  const size_t nt = static_cast<size_t>(n_chunks * n_ctx);
  if (std::fwrite(tokens.data(), 4, nt, k->f_) != nt) fail("KL base '%s': write failed", path.c_str());
  return k;
}

std::unique_ptr<KlBase> KlBase::open(const std::string& path, int64_t n_vocab, int64_t n_ctx,
                                     const std::vector<int32_t>& tokens, int64_t n_chunks) {
  std::unique_ptr<KlBase> k(new KlBase());
  k->path_ = path;
  k->n_vocab_ = n_vocab;
  k->f_ = std::fopen(path.c_str(), "rb");
  if (!k->f_) fail("cannot open KL base '%s': %s", path.c_str(), std::strerror(errno));
  char magic[8];
  uint32_t h[5];
  if (std::fread(magic, 1, 8, k->f_) != 8 || std::memcmp(magic, kMagic, 8) != 0 || std::fread(h, 4, 5, k->f_) != 5)
    fail("%s: not a k3 KL base file", path.c_str());
  if (h[0] != kVersion) fail("%s: KL base version %u, expected %u", path.c_str(), h[0], kVersion);
  if (h[1] != n_vocab) fail("%s: made with a vocabulary of %u tokens, this model has %lld", path.c_str(), h[1],
                            static_cast<long long>(n_vocab));
  if (h[2] != n_ctx) fail("%s: made with -c %u, this run uses -c %lld", path.c_str(), h[2], static_cast<long long>(n_ctx));
  if (h[3] != n_ctx / 2) fail("%s: unexpected first scored position %u", path.c_str(), h[3]);
  if (h[4] < n_chunks)
    fail("%s: holds %u chunks, this run scores %lld (use --chunks)", path.c_str(), h[4], static_cast<long long>(n_chunks));
  std::vector<int32_t> t(static_cast<size_t>(h[4]) * h[2]);
  if (std::fread(t.data(), 4, t.size(), k->f_) != t.size()) fail("%s: truncated", path.c_str());
  for (size_t i = 0; i < static_cast<size_t>(n_chunks * n_ctx); ++i)
    if (t[i] != tokens[i])
      fail("%s: token %zu differs (%d in the file, %d here): the base was made from another text or tokenizer",
           path.c_str(), i, t[i], tokens[i]);
  return k;
}

KlBase::~KlBase() {
  if (f_) std::fclose(f_);
  if (writing_ && !finished_) std::remove(tmp_.c_str());
}

void KlBase::write_rows(const float* logp, int64_t rows) {
  const size_t n = static_cast<size_t>(rows * n_vocab_);
  if (std::fwrite(logp, 4, n, f_) != n) fail("KL base '%s': write failed", path_.c_str());
}

void KlBase::read_rows(float* logp, int64_t rows) {
  const size_t n = static_cast<size_t>(rows * n_vocab_);
  if (std::fread(logp, 4, n, f_) != n) fail("KL base '%s': truncated", path_.c_str());
}

void KlBase::finish() {
  if (!writing_ || finished_) return;
  if (std::fflush(f_) != 0 || std::fclose(f_) != 0) {
    f_ = nullptr;
    fail("KL base '%s': write failed", path_.c_str());
  }
  f_ = nullptr;
  std::filesystem::rename(tmp_, path_);
  finished_ = true;
}

// ---- scoring ----

int64_t count_chunks(int64_t n_tokens, const PplOptions& o) {
  if (o.n_ctx < 4) fail("context %lld is too small (at least 4)", static_cast<long long>(o.n_ctx));
  int64_t n = n_tokens / o.n_ctx;
  if (n == 0)
    fail("the text has %lld tokens, fewer than one context of %lld (use a smaller -c)", static_cast<long long>(n_tokens),
         static_cast<long long>(o.n_ctx));
  if (o.max_chunks > 0) n = std::min(n, o.max_chunks);
  return n;
}

PplResult perplexity(const model::Model& m, const std::vector<int32_t>& tokens, const PplOptions& o, KlBase* save,
                     KlBase* base, KlStats* kl, const std::function<void(int64_t, int64_t, double)>& progress) {
  const int64_t n_chunks = count_chunks(static_cast<int64_t>(tokens.size()), o);
  const int64_t C = o.n_ctx, first = C / 2, V = m.n_vocab();
  ThreadPool pool(std::max(1, o.threads));
  model::RunOptions ropt;
  ropt.pool = &pool;
  ropt.f16_rule = model::default_f16_rule();
  ropt.experts = o.experts;
  PplResult r;
  r.n_ctx = C;
  r.n_chunks = n_chunks;
  std::vector<float> logits, lp(static_cast<size_t>(V)), blp;
  if (base) blp.resize(static_cast<size_t>((C - 1 - first) * V));
  for (int64_t c = 0; c < n_chunks; ++c) {
    const std::vector<int32_t> ids(tokens.begin() + c * C, tokens.begin() + (c + 1) * C);
    model::State st = m.new_state(C);
    m.prefill(st, ids, o.n_batch, ropt, model::Logits::All, &logits);
    if (base) base->read_rows(blp.data(), C - 1 - first);
    for (int64_t j = first; j < C - 1; ++j) {
      log_softmax(&logits[static_cast<size_t>(j * V)], lp.data(), V);
      const int32_t next = ids[static_cast<size_t>(j + 1)];
      const double nll = -static_cast<double>(lp[static_cast<size_t>(next)]);
      r.nll += nll;
      r.nll2 += nll * nll;
      ++r.n_tokens;
      if (save) save->write_rows(lp.data(), 1);
      if (base && kl) kl->add(&blp[static_cast<size_t>((j - first) * V)], lp.data(), V, next);
    }
    r.chunk_ppl.push_back(r.ppl());
    if (progress) progress(c, n_chunks, r.ppl());
  }
  return r;
}

}  // namespace k3::quant
