// k3 draft: one DSpark block from token ids, for checking a draft against a reference: every id
// but the last is the verified context (the target runs over it and is tapped), the last is the
// anchor at its position; prints the drafted ids, the final normed hidden rows and the top base
// logits (before the Markov bias) per row.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include "model/model.h"
#include "spec/dspark.h"
#include "spec/taps.h"

using namespace k3;

static int cmd_draft(int argc, char** argv) {
  CLI::App app{"Runs the DSpark draft once: the target over all ids but the last (tapped), then one block for the "
               "last id as the anchor. Prints {tokens, hidden, base_top} (dspark.md §6-§8).",
               "k3 draft"};
  std::string target_path, draft_path, ids_str, f16_rule;
  int n = 7, threads = 0, top = 5;
  bool json = false;
  app.add_option("-m,--model", target_path, "target GGUF")->required();
  app.add_option("--draft,--model-draft", draft_path, "(-md) DSpark draft GGUF")->required();
  app.add_option("--ids", ids_str, "comma-separated token ids: the context, then the anchor")->required();
  app.add_option("-n", n, "block rows (drafted tokens)")->capture_default_str();
  app.add_option("--top", top, "base logits listed per row")->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  app.add_option("--f16-rule", f16_rule, "amx | round (default: from the CPU)");
  app.add_flag("--json", json, "one JSON object (default: a line per row)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::vector<int32_t> ids = cli::parse_ids(ids_str);
  if (ids.empty()) fail("--ids: no ids");
  if (n < 1) fail("-n must be >= 1");
  auto m = model::Model::load(target_path);
  auto d = spec::DraftModel::load(draft_path, *m, static_cast<uint32_t>(n));
  ThreadPool pool(cli::pick_threads(threads));
  spec::Taps taps(d->taps(), m->hparams().n_layer, m->hparams().n_embd);
  model::RunOptions opt{&pool, cli::parse_f16_rule(f16_rule), &taps};
  const int64_t p = static_cast<int64_t>(ids.size()) - 1;
  model::State st = m->new_state(std::max<int64_t>(p, 1));
  std::vector<float> side;
  model::Ctx ctx{pool};
  if (p > 0) {
    m->forward(st, ids.data(), p, opt, model::Logits::None, nullptr);
    d->add_context(ctx, taps.row(0), p, 0, side);
  }
  std::vector<int32_t> out;
  spec::DraftModel::Debug dbg;
  d->propose(ctx, side, ids.back(), n, out, &dbg);

  const int64_t H = m->hparams().n_embd, V = m->n_vocab();
  nlohmann::json j = {{"tokens", out}, {"hidden", nlohmann::json::array()}, {"base_top", nlohmann::json::array()}};
  std::vector<int32_t> order(V);
  for (int64_t t = 0; t < n; ++t) {
    const float* h = dbg.hidden.data() + t * H;
    j["hidden"].push_back(std::vector<float>(h, h + H));
    const float* b = dbg.base.data() + t * V;
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min<int>(top, static_cast<int>(V));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t x, int32_t y) { return b[x] > b[y] || (b[x] == b[y] && x < y); });
    nlohmann::json row = nlohmann::json::array();
    for (int i = 0; i < k; ++i) row.push_back({{"id", order[i]}, {"logit", b[order[i]]}});
    j["base_top"].push_back(row);
  }
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  for (int64_t t = 0; t < n; ++t)
    std::printf("row %lld (position %lld): token %d, base top %s\n", static_cast<long long>(t),
                static_cast<long long>(p + 1 + t), out[t], j["base_top"][t].dump().c_str());
  return 0;
}

K3_COMMAND("draft", "run a DSpark draft block on token ids (debugging view)", cmd_draft);
