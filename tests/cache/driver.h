// The cache tests' two ways of running a request: through the prompt cache exactly as the server
// engine does (restore, prefill in chunks that stop at every snapshot position, greedy tokens,
// finish), and the plain path (a fresh state, the prompt in one forward pass).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "model/model.h"
#include "tensor/threadpool.h"

namespace k3::test {

struct Outcome {
  std::vector<std::vector<float>> logits;  // those each generated token was chosen from
  std::vector<int32_t> tokens;
  int64_t cached = 0;
  std::optional<model::State> state;  // after the last token fed
};

Outcome run_cached(const model::Model& m, cache::PrefixCache& c, const std::vector<int32_t>& prompt,
                   const std::vector<int64_t>& boundaries, int64_t n_batch, int n_gen, ThreadPool& pool);
Outcome run_plain(const model::Model& m, const std::vector<int32_t>& prompt, int n_gen, ThreadPool& pool);

// Every value of both states, bit for bit (and the same length).
bool same_bits(const model::State& a, const model::State& b);
// A new empty directory under the test temp dir.
std::string fresh_dir(const std::string& name);
cache::Options ram_options(int64_t ram_bytes, const std::string& dir = "");

}  // namespace k3::test
