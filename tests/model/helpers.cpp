#include "helpers.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/sampler.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace k3::test {


std::string temp_dir() {
  static TempDir d("k3-model-test");
  return d.path();
}
std::string temp_path(const std::string& name) { return temp_dir() + "/" + name; }

std::string make_model(const model::SynthOptions& o, const std::string& name) {
  const std::string p = temp_path(name + ".gguf");
  if (!fs::exists(p)) model::write_synthetic(p, o);
  return p;
}

static model::SynthOptions base(float eps) {
  model::SynthOptions o = model::synth_preset("tiny");
  o.rms_eps = eps;
  o.seed = 11;
  return o;
}

model::SynthOptions config_a(float eps) {
  model::SynthOptions o = base(eps);
  o.n_layer = 17;  // MLA at 3, 7, 11, 15 and 16 (the last two)
  o.attn_res_block = 3;
  o.n_expert = 8, o.n_expert_used = 3;
  return o;
}

model::SynthOptions config_b(float eps) {
  model::SynthOptions o = base(eps);
  o.n_layer = 9;
  o.no_q_lora = true, o.no_latent = true, o.softplus_gate = true;
  o.seed = 12;
  return o;
}

model::SynthOptions config_c(float eps) {
  model::SynthOptions o = base(eps);
  o.n_layer = 9;
  o.type = GgmlType::F16, o.expert_type = GgmlType::MXFP4;
  o.seed = 13;
  return o;
}

model::SynthOptions config_d(float eps) {
  model::SynthOptions o = base(eps);
  o.n_layer = 9;
  o.type = GgmlType::Q8_0, o.expert_type = GgmlType::Q8_0;
  o.seed = 14;
  return o;
}

int run_cmd(const std::string& cmd, std::string* out, bool merge_stderr) {
  const std::string full = cmd + (merge_stderr ? " 2>&1" : "");
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  std::string s;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
  const int st = pclose(p);
  if (out) *out = s;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string llama_harness() {
  const char* src = std::getenv("K3_SOURCE_DIR");
  const std::string root = src ? src : K3_SOURCE_DIR_FALLBACK;
  const std::string h = root + "/tests/node/llama.mjs";
  if (!fs::exists(h)) ADD_FAILURE() << "llama.cpp harness missing: " << h << " (see tests/node/README.md)";
  std::string out;
  if (run_cmd("node --version", &out) != 0) ADD_FAILURE() << "node is not installed: " << out;
  return h;
}

static std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

Rows llama_logits(const std::string& model, const std::vector<int32_t>& ids, const std::string& mode) {
  Rows r;
  const std::string h = llama_harness();
  const std::string js = temp_path("llama_logits.json"), bin = temp_path("llama_logits.f32");
  std::string out;
  const std::string cmd = "node " + h + " logits --model " + model + " --ids " + join(ids) + " --mode " + mode +
                          " --threads 1 --out " + js + " --bin " + bin;
  if (run_cmd(cmd, &out) != 0) {
    ADD_FAILURE() << cmd << "\n" << out;
    return r;
  }
  std::ifstream jf(js);
  const nlohmann::json j = nlohmann::json::parse(jf);
  r.n_vocab = j["n_vocab"].get<int32_t>();
  std::ifstream bf(bin, std::ios::binary);
  for (size_t t = 0; t < ids.size(); ++t) {
    std::vector<float> row(r.n_vocab);
    bf.read(reinterpret_cast<char*>(row.data()), sizeof(float) * r.n_vocab);
    r.rows.push_back(std::move(row));
  }
  if (!bf) ADD_FAILURE() << "short logits file " << bin;
  return r;
}

std::vector<int32_t> llama_generate(const std::string& model, const std::vector<int32_t>& ids, int n) {
  const std::string h = llama_harness();
  const std::string js = temp_path("llama_gen.json");
  std::string out;
  const std::string cmd = "node " + h + " generate --model " + model + " --ids " + join(ids) + " -n " +
                          std::to_string(n) + " --threads 1 --out " + js;
  if (run_cmd(cmd, &out) != 0) {
    ADD_FAILURE() << cmd << "\n" << out;
    return {};
  }
  std::ifstream jf(js);
  return nlohmann::json::parse(jf)["ids"].get<std::vector<int32_t>>();
}

Rows k3_logits(const model::Model& m, const std::vector<int32_t>& ids, int64_t chunk, int threads,
               model::F16Rule rule) {
  ThreadPool pool(threads);
  model::RunOptions opt{&pool, rule, nullptr};
  model::State st = m.new_state(static_cast<int64_t>(ids.size()) + 8);
  std::vector<float> logits;
  m.prefill(st, ids, chunk, opt, model::Logits::All, &logits);
  Rows r;
  r.n_vocab = m.n_vocab();
  for (size_t t = 0; t < ids.size(); ++t)
    r.rows.emplace_back(logits.begin() + t * r.n_vocab, logits.begin() + (t + 1) * r.n_vocab);
  return r;
}

std::vector<int32_t> k3_generate(const model::Model& m, const std::vector<int32_t>& ids, int n, int threads) {
  ThreadPool pool(threads);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  model::State st = m.new_state(static_cast<int64_t>(ids.size()) + n + 1);
  std::vector<float> logits;
  m.prefill(st, ids, 0, opt, model::Logits::Last, &logits);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t id = model::Sampler::argmax(logits.data(), m.n_vocab());
    out.push_back(id);
    if (i + 1 < n) m.forward(st, &id, 1, opt, model::Logits::Last, &logits);
  }
  return out;
}

double max_abs_diff(const Rows& a, const Rows& b) {
  if (a.n_vocab != b.n_vocab || a.rows.size() != b.rows.size()) return INFINITY;
  double m = 0;
  for (size_t t = 0; t < a.rows.size(); ++t)
    for (int32_t v = 0; v < a.n_vocab; ++v) {
      const double d = std::fabs(static_cast<double>(a.rows[t][v]) - b.rows[t][v]);
      if (!(d <= m)) m = d;  // NaN propagates as a failure
    }
  return m;
}

Agreement agreement(const Rows& p, const Rows& q) {
  Agreement a;
  if (p.n_vocab != q.n_vocab || p.rows.size() != q.rows.size() || p.rows.empty()) return a;
  auto log_softmax = [](const std::vector<float>& r) {
    const double mx = *std::max_element(r.begin(), r.end());
    double z = 0;
    for (float v : r) z += std::exp(v - mx);
    std::vector<double> o(r.size());
    for (size_t i = 0; i < r.size(); ++i) o[i] = r[i] - mx - std::log(z);
    return o;
  };
  double kl = 0, same = 0;
  for (size_t t = 0; t < p.rows.size(); ++t) {
    const auto lp = log_softmax(p.rows[t]), lq = log_softmax(q.rows[t]);
    for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    same += std::max_element(lp.begin(), lp.end()) - lp.begin() == std::max_element(lq.begin(), lq.end()) - lq.begin();
  }
  a.mean_kl = kl / p.rows.size();
  a.top1 = same / p.rows.size();
  return a;
}

double max_abs(const Rows& a) {
  double m = 0;
  for (const auto& r : a.rows)
    for (float x : r) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

std::vector<int32_t> prompt_ids(int n, int32_t n_vocab, uint64_t seed) {
  std::vector<int32_t> ids;
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(n_vocab)));
  }
  return ids;
}

}  // namespace k3::test
