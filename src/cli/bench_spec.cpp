#include "cli/bench_spec.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "model/expert_source.h"

namespace k3::cli {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Serves the mapped experts (or another source's) and counts the distinct experts each MoE layer
// of a pass asks for.
class CountingExperts : public model::ExpertSource {
 public:
  CountingExperts(const model::Model& m, model::ExpertSource* inner) : m_(m), inner_(inner) {}
  void request(uint32_t il, std::vector<int32_t>& e, const float* x, int64_t T) override {
    distinct_ += static_cast<double>(e.size()), ++layers_;
    if (inner_) inner_->request(il, e, x, T);
  }
  model::ExpertMats acquire(uint32_t il, int32_t e) override {
    if (inner_) return inner_->acquire(il, e);
    const model::LayerWeights& w = m_.weights().layers[il];
    return {w.gate_exps.mat(e), w.up_exps.mat(e), w.down_exps.mat(e)};
  }
  void done(uint32_t il, int32_t e) override {
    if (inner_) inner_->done(il, e);
  }
  void release(uint32_t il) noexcept override {
    if (inner_) inner_->release(il);
  }
  double per_layer() const { return layers_ ? distinct_ / layers_ : 0; }

 private:
  const model::Model& m_;
  model::ExpertSource* inner_;
  double distinct_ = 0, layers_ = 0;
};

}  // namespace

json bench_verify_curve(const model::Model& m, const model::RunOptions& opt, int kmax, int64_t ctx, int reps) {
  const model::HParams& hp = m.hparams();
  const int32_t V = m.n_vocab();
  uint32_t rng = 777;
  auto tok = [&] { return static_cast<int32_t>((rng = rng * 1103515245u + 12345u) % static_cast<uint32_t>(V)); };
  std::vector<int32_t> prompt(std::max<int64_t>(ctx, 1));
  for (auto& t : prompt) t = tok();
  std::vector<float> logits;
  // per k: pass seconds in each journal mode, rewind seconds, distinct experts
  struct Row {
    std::vector<double> pass[2], rewind[2];
    double distinct = 0;
  };
  std::vector<Row> rows(kmax + 1);
  const model::KeepMode modes[2] = {model::KeepMode::Inputs, model::KeepMode::States};
  model::State st = m.new_state(static_cast<int64_t>(prompt.size()) + 2 * (reps + 1) * (kmax + 2) + 8);
  m.forward(st, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::Last, &logits);
  std::vector<int32_t> ids;
  // a pass of k + 1 rows, then (k > 0) the rollback to its first row: every draft rejected
  auto pass = [&](int k, model::KeepMode mode, double* pass_s, double* rewind_s) {
    ids.resize(k + 1);
    for (auto& t : ids) t = tok();
    st.keep_rows(k > 0 ? k + 1 : 0, mode);
    const auto t0 = Clock::now();
    m.forward(st, ids.data(), k + 1, opt, k > 0 ? model::Logits::All : model::Logits::Last, &logits);
    *pass_s = since(t0);
    const auto t1 = Clock::now();
    if (k > 0) st.rewind(st.n_past() - k, *opt.pool);
    *rewind_s = since(t1);
  };
  double ps = 0, rs = 0;
  for (int k = 0; k <= kmax; ++k) pass(k, modes[0], &ps, &rs);  // warm-up
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k <= kmax; ++k)
      for (int mode = 0; mode < (k > 0 ? 2 : 1); ++mode) {
        pass(k, modes[mode], &ps, &rs);
        rows[k].pass[mode].push_back(ps), rows[k].rewind[mode].push_back(rs);
      }
  for (int k = 0; k <= kmax; ++k) {  // distinct experts, untimed
    CountingExperts count(m, opt.experts);
    model::RunOptions copt = opt;
    copt.experts = &count;
    ids.resize(k + 1);
    for (auto& t : ids) t = tok();
    st.keep_rows(k > 0 ? k + 1 : 0);
    m.forward(st, ids.data(), k + 1, copt, model::Logits::All, &logits);
    if (k > 0) st.rewind(st.n_past() - k, *opt.pool);
    rows[k].distinct = count.per_layer();
  }
  const double plain = median(rows[0].pass[0]);
  json out = json::array();
  const double E = hp.n_expert;
  uint32_t used = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) used = std::max(used, hp.n_expert_used[il]);
  for (int k = 0; k <= kmax; ++k) {
    const double b = k + 1;
    json j = {{"drafts", k},
              {"rows", b},
              {"pass_ms", 1e3 * (k ? median(rows[k].pass[0]) : plain)},
              {"ratio", (k ? median(rows[k].pass[0]) : plain) / plain},
              {"distinct_experts", rows[k].distinct},
              {"expected_distinct_experts", E > 0 ? E * (1 - std::pow(1 - used / E, b)) : 0.0}};
    if (k > 0)
      j.update({{"pass_states_ms", 1e3 * median(rows[k].pass[1])},
                {"rewind_inputs_ms", 1e3 * median(rows[k].rewind[0])},
                {"rewind_states_ms", 1e3 * median(rows[k].rewind[1])}});
    out.push_back(j);
  }
  // The snapshot-and-replay alternative: a copy of the KDA states before the pass (restore is
  // another), then a pass over the kept rows again, whose cost the curve gives.
  std::vector<float> copy;
  std::vector<double> copy_s;
  for (int r = 0; r < std::max(reps, 3); ++r) {
    const auto t0 = Clock::now();
    copy.clear();
    for (const model::LayerState& ls : st.layers) copy.insert(copy.end(), ls.rec.begin(), ls.rec.end());
    copy_s.push_back(since(t0));
  }
  return {{"context", static_cast<int64_t>(prompt.size())},
          {"plain_ms", 1e3 * plain},
          {"kda_state_bytes", copy.size() * sizeof(float)},
          {"kda_state_copy_ms", 1e3 * median(copy_s)},
          {"curve", out}};
}

json bench_draft_cost(const model::Model& m, const spec::DraftModel& d, ThreadPool& pool, int64_t ctx, int reps) {
  const int64_t H = m.hparams().n_embd, W = static_cast<int64_t>(d.taps().size()) * H;
  std::vector<float> taps(std::max<int64_t>(ctx, 1) * W), side;
  uint32_t rng = 99;
  for (float& v : taps) v = static_cast<float>((rng = rng * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  model::Ctx c{pool};
  const auto t0 = Clock::now();
  d.add_context(c, taps.data(), std::max<int64_t>(ctx, 1), 0, side);
  const double ctx_s = since(t0);
  std::vector<int32_t> out;
  json rows = json::array();
  d.propose(c, side, 1, 1, out);  // warm-up
  for (uint32_t n = 1; n <= d.params().block_size; ++n) {
    std::vector<double> s;
    for (int r = 0; r < reps; ++r) {
      const auto t1 = Clock::now();
      d.propose(c, side, 1, n, out);
      s.push_back(since(t1));
    }
    rows.push_back({{"rows", n}, {"block_ms", 1e3 * median(s)}});
  }
  return {{"context", std::max<int64_t>(ctx, 1)},
          {"context_rows_ms_per_position", 1e3 * ctx_s / static_cast<double>(std::max<int64_t>(ctx, 1))},
          {"step_bytes", d.step_bytes()},
          {"blocks", rows}};
}

json bench_scripted(const model::Model& m, const model::RunOptions& opt, spec::Drafting& d,
                    const std::vector<int32_t>& prompt, const std::vector<int32_t>& script, int reps) {
  const int64_t n = static_cast<int64_t>(script.size());
  model::RunOptions o = opt;
  o.trace = d.taps();
  std::vector<float> logits;
  std::vector<double> plain_s, spec_s;
  spec::SpecStats stats;
  for (int r = 0; r < reps; ++r) {
    {  // plain: one scripted token a pass
      model::State st = m.new_state(static_cast<int64_t>(prompt.size()) + n + 8);
      m.forward(st, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::Last, &logits);
      const auto t0 = Clock::now();
      for (int64_t i = 0; i + 1 < n; ++i) m.forward(st, &script[i], 1, opt, model::Logits::Last, &logits);
      plain_s.push_back(since(t0));
    }
    model::State st = m.new_state(static_cast<int64_t>(prompt.size()) + n + 8);
    spec::Speculator sp(d, st);
    m.forward(st, prompt.data(), static_cast<int64_t>(prompt.size()), o, model::Logits::Last, &logits);
    sp.prompt(prompt, d.taps() ? d.taps()->row(0) : nullptr);
    sp.first(script[0]);
    const auto t0 = Clock::now();
    for (int64_t done = 1; done < n;) {
      const std::vector<int32_t>& ids = sp.plan(n - done);
      const auto tp = Clock::now();
      m.forward(st, ids.data(), static_cast<int64_t>(ids.size()), o, model::Logits::All, &logits);
      d.timed(static_cast<int64_t>(ids.size()), since(tp));
      const std::vector<int32_t>& e = sp.verify_forced({script.data() + done, static_cast<size_t>(n - done)});
      sp.commit(static_cast<int64_t>(e.size()), d.taps() ? d.taps()->row(0) : nullptr);
      done += static_cast<int64_t>(e.size());
    }
    spec_s.push_back(since(t0));
    if (r == reps - 1) stats = sp.stats();
  }
  const double tp = (n - 1) / median(plain_s), ts = (n - 1) / median(spec_s);
  return {{"prompt_tokens", prompt.size()},
          {"tokens", n},
          {"type", spec::spec_type_name(d.options().type)},
          {"plain_tokens_per_s", tp},
          {"spec_tokens_per_s", ts},
          {"speedup", ts / tp},
          {"steps", stats.steps},
          {"passes", stats.passes},
          {"draft_tokens", stats.drafted},
          {"draft_accepted", stats.accepted},
          {"accepted_hist", stats.accepted_hist},
          {"tokens_per_step", stats.steps ? double(stats.emitted) / double(stats.steps) : 0.0},
          {"draft_s", stats.draft_s}};
}

void print_spec_bench(const json& j) {
  if (j.contains("verify")) {
    const json& v = j["verify"];
    std::printf("\nverify passes after %lld tokens (plain step %.2f ms; KDA state %.1f MB, copied in %.2f ms):\n"
                "  %-6s %10s %7s %9s %9s %11s %11s %12s\n",
                v["context"].get<long long>(), v["plain_ms"].get<double>(), v["kda_state_bytes"].get<double>() / 1e6,
                v["kda_state_copy_ms"].get<double>(), "drafts", "pass ms", "ratio", "experts", "expected",
                "states ms", "rewind in", "rewind st");
    for (const json& r : v["curve"]) {
      std::printf("  %-6d %10.2f %7.3f %9.1f %9.1f", r["drafts"].get<int>(), r["pass_ms"].get<double>(),
                  r["ratio"].get<double>(), r["distinct_experts"].get<double>(),
                  r["expected_distinct_experts"].get<double>());
      if (r.contains("pass_states_ms"))
        std::printf(" %11.2f %11.3f %12.3f", r["pass_states_ms"].get<double>(), r["rewind_inputs_ms"].get<double>(),
                    r["rewind_states_ms"].get<double>());
      std::printf("\n");
    }
  }
  if (j.contains("draft")) {
    const json& d = j["draft"];
    std::printf("\ndraft block after %lld context rows (%.1f MB read a step; context rows %.3f ms a position):",
                d["context"].get<long long>(), d["step_bytes"].get<double>() / 1e6,
                d["context_rows_ms_per_position"].get<double>());
    for (const json& r : d["blocks"]) std::printf(" %d: %.2f ms", r["rows"].get<int>(), r["block_ms"].get<double>());
    std::printf("\n");
  }
  if (j.contains("scripted")) {
    const json& s = j["scripted"];
    std::printf("\nscripted decode of %lld tokens (%s drafts): plain %.2f tok/s, speculative %.2f tok/s (x%.2f); %lld of "
                "%lld drafts accepted, %.2f tokens per step\n",
                s["tokens"].get<long long>(), s["type"].get<std::string>().c_str(),
                s["plain_tokens_per_s"].get<double>(), s["spec_tokens_per_s"].get<double>(),
                s["speedup"].get<double>(), s["draft_accepted"].get<long long>(), s["draft_tokens"].get<long long>(),
                s["tokens_per_step"].get<double>());
  }
}

}  // namespace k3::cli
