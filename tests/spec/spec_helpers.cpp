#include "spec_helpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace k3::test {

std::string k3_bin() {
  const char* d = std::getenv("K3_BIN_DIR");
  return std::string(d ? d : K3_BIN_DIR_FALLBACK) + "/k3";
}

std::string ref_script() {
  const char* s = std::getenv("K3_SOURCE_DIR");
  return std::string(s ? s : K3_SOURCE_DIR_FALLBACK) + "/tests/spec/dspark_ref.py";
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::string make_draft(const model::Model& target, const std::string& name, const std::string& extra) {
  const model::HParams& hp = target.hparams();
  const std::string hf = temp_path(name + "-hf"), out = temp_path(name + ".gguf");
  if (std::filesystem::exists(out)) return out;
  std::string log;
  const std::string w = "/usr/bin/python3 " + ref_script() + " write " + hf + " --hidden " + std::to_string(hp.n_embd) +
                        " --vocab " + std::to_string(hp.n_vocab) + " --target-layers " + std::to_string(hp.n_layer) +
                        " " + extra;
  if (run_cmd(w, &log) != 0) {
    ADD_FAILURE() << w << "\n" << log;
    return "";
  }
  const std::string c = k3_bin() + " convert -q --src " + hf + " --out-dir " + temp_dir() + " --name " + name;
  if (run_cmd(c, &log) != 0) {
    ADD_FAILURE() << c << "\n" << log;
    return "";
  }
  return out;
}

static bool stops(const std::vector<int32_t>& stop, int32_t id) {
  return std::find(stop.begin(), stop.end(), id) != stop.end();
}

Generated generate_plain(const model::Model& m, const std::vector<int32_t>& prompt, int n, model::Sampler& s,
                         const std::vector<int32_t>& stop, int threads) {
  ThreadPool pool(threads);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  Generated g{{}, m.new_state(static_cast<int64_t>(prompt.size()) + n + 8), {}};
  std::vector<float> logits;
  m.forward(g.state, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::Last, &logits);
  for (;;) {
    const int32_t id = s.sample(logits.data(), m.n_vocab());
    g.ids.push_back(id);
    if (stops(stop, id) || static_cast<int>(g.ids.size()) == n) return g;
    m.forward(g.state, &id, 1, opt, model::Logits::Last, &logits);
  }
}

Generated generate_spec(const model::Model& m, spec::Drafting& d, const std::vector<int32_t>& prompt, int n,
                        model::Sampler& s, const std::vector<int32_t>& stop) {
  model::RunOptions opt{&d.pool(), model::default_f16_rule(), d.taps()};
  Generated g{{}, m.new_state(static_cast<int64_t>(prompt.size()) + n + 8), {}};
  spec::Speculator sp(d, g.state);
  std::vector<float> logits;
  m.forward(g.state, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::Last, &logits);
  sp.prompt(prompt, d.taps() ? d.taps()->row(0) : nullptr);
  const int32_t first = s.sample(logits.data(), m.n_vocab());
  sp.first(first);
  g.ids.push_back(first);
  bool more = !stops(stop, first) && n > 1;
  while (more) {
    const std::vector<int32_t>& ids = sp.plan(n - static_cast<int64_t>(g.ids.size()));
    m.forward(g.state, ids.data(), static_cast<int64_t>(ids.size()), opt, model::Logits::All, &logits);
    const std::vector<int32_t>& e = sp.verify(logits.data(), s);
    int64_t r = 0;
    while (more && r < static_cast<int64_t>(e.size())) {
      g.ids.push_back(e[r++]);
      more = !stops(stop, g.ids.back()) && static_cast<int>(g.ids.size()) < n;
    }
    sp.commit(r, d.taps() ? d.taps()->row(0) : nullptr);
  }
  g.stats = sp.stats();
  return g;
}

}  // namespace k3::test
