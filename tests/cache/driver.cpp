#include "driver.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "helpers.h"

namespace k3::test {

namespace {

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// n_gen greedy tokens from `logits` (those after the prompt); every token but the last is fed.
void generate(const model::Model& m, model::State& st, std::vector<float>& logits, int n_gen,
              const model::RunOptions& opt, Outcome& o, std::vector<int32_t>* fed) {
  for (int g = 0; g < n_gen; ++g) {
    o.logits.push_back(logits);
    const int32_t t = argmax(logits);
    o.tokens.push_back(t);
    if (g + 1 == n_gen || st.n_past() >= st.n_ctx()) break;
    m.forward(st, &t, 1, opt, model::Logits::Last, &logits);
    if (fed) fed->push_back(t);
  }
}

}  // namespace

Outcome run_cached(const model::Model& m, cache::PrefixCache& c, const std::vector<int32_t>& prompt,
                   const std::vector<int64_t>& boundaries, int64_t n_batch, int n_gen, ThreadPool& pool) {
  const model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  Outcome o;
  o.state.emplace(m.new_state(256));
  model::State& st = *o.state;
  auto seq = c.begin(cache::Key{prompt, {}}, boundaries);
  std::vector<float> logits;
  o.cached = cache::prefill(m, *seq, st, prompt, n_batch, opt, logits);
  std::vector<int32_t> fed = prompt;
  generate(m, st, logits, n_gen, opt, o, &fed);
  seq->finish(fed, st, logits);
  return o;
}

Outcome run_plain(const model::Model& m, const std::vector<int32_t>& prompt, int n_gen, ThreadPool& pool) {
  const model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  Outcome o;
  o.state.emplace(m.new_state(256));
  std::vector<float> logits;
  m.forward(*o.state, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::Last, &logits);
  generate(m, *o.state, logits, n_gen, opt, o, nullptr);
  return o;
}

bool same_bits(const model::State& a, const model::State& b) {
  if (a.n_past() != b.n_past() || a.layers.size() != b.layers.size()) return false;
  auto eq = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  for (size_t i = 0; i < a.layers.size(); ++i)
    if (!eq(a.layers[i].conv, b.layers[i].conv) || !eq(a.layers[i].rec, b.layers[i].rec) ||
        !eq(a.layers[i].kv, b.layers[i].kv))
      return false;
  return true;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = temp_path(name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

cache::Options ram_options(int64_t ram_bytes, const std::string& dir) {
  cache::Options o;
  o.ram_bytes = ram_bytes;
  o.dir = dir;
  o.disk_bytes = int64_t{1} << 40;
  o.snapshot_min_gap = 1;  // every position asked for, so that the tests reach all of them
  o.log = [](cache::Level, const std::string&) {};
  return o;
}

}  // namespace k3::test
