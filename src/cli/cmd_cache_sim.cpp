// k3 cache-sim: replays a recorded routing trace (--routing-trace on run / bench / serve) against
// the expert cache policies at several cache sizes, with Belady's optimum as the bound.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "model/cache_policy.h"

using namespace k3;

static int cmd_cache_sim(int argc, char** argv) {
  CLI::App app{
      "Replay a routing trace against expert cache policies (lru, freq, belady = optimal) at several "
      "cache sizes, in experts or as fractions of all routed experts.",
      "k3 cache-sim"};
  std::string trace_path;
  std::vector<double> sizes;
  std::vector<std::string> policies{"lru", "freq", "belady"};
  double half_life = 4096;
  bool as_json = false;
  app.add_option("trace", trace_path, "routing trace file")->required();
  app.add_option("--sizes", sizes, "cache sizes: experts (>= 1) or fractions of all experts (< 1)")
      ->default_str("0.1 0.25 0.5");
  app.add_option("--policies", policies, "policies to replay")->capture_default_str();
  app.add_option("--half-life", half_life, "freq policy: requests to a layer that halve a count")
      ->capture_default_str();
  app.add_flag("--json", as_json, "print one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (sizes.empty()) sizes = {0.1, 0.25, 0.5};
  const model::RoutingTrace tr = model::RoutingTrace::load(trace_path);
  size_t largest = 1, accesses = 0;
  for (const auto& g : tr.groups) largest = std::max(largest, g.experts.size()), accesses += g.experts.size();
  const double total = static_cast<double>(tr.n_layer) * tr.n_expert;
  nlohmann::json out = {{"trace", trace_path},
                        {"groups", tr.groups.size()},
                        {"accesses", accesses},
                        {"results", nlohmann::json::array()}};
  if (!as_json)
    std::printf("%s: %zu requests, %zu expert accesses, %u layers x %d experts\n\n  %10s %8s", trace_path.c_str(),
                tr.groups.size(), accesses, tr.n_layer, tr.n_expert, "capacity", "share");
  if (!as_json) {
    for (const auto& p : policies) std::printf(" %9s", p.c_str());
    std::printf("   (hit rate)\n");
  }
  for (double sz : sizes) {
    if (!(sz > 0)) fail("--sizes: %g is not a positive size", sz);
    int64_t cap = sz < 1 ? static_cast<int64_t>(sz * total + 0.5) : static_cast<int64_t>(sz);
    cap = std::max<int64_t>(cap, static_cast<int64_t>(largest));
    if (!as_json) std::printf("  %10lld %7.1f%%", static_cast<long long>(cap), 100.0 * cap / total);
    for (const auto& p : policies) {
      const model::SimResult r = model::simulate(tr, p, cap, half_life);
      out["results"].push_back(
          {{"policy", p}, {"capacity", cap}, {"hits", r.hits}, {"misses", r.misses}, {"hit_rate", r.hit_rate()}});
      if (!as_json) std::printf(" %8.1f%%", 100 * r.hit_rate());
    }
    if (!as_json) std::printf("\n");
  }
  if (as_json) std::printf("%s\n", out.dump().c_str());
  return 0;
}

K3_COMMAND("cache-sim", "replay a routing trace against expert cache policies (LRU, frequency-aware, Belady)",
           cmd_cache_sim);
