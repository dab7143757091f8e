// k3 bench's speculative-decoding measurements (docs/spec.md): the verify-cost curve (a pass of
// k+1 rows against a plain decode step, with the distinct experts the rows read and the rollback's
// cost in both journal modes), the DSpark block's own cost, and a scripted decode — the target's
// tokens fixed by a text, drafts from n-gram lookup or the draft — against plain decoding of the
// same tokens, in the same run.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "spec/speculator.h"

namespace k3::cli {

// k = 0 (a plain step) .. kmax, each pass at a context of ctx tokens; median of reps passes.
nlohmann::json bench_verify_curve(const model::Model& m, const model::RunOptions& opt, int kmax, int64_t ctx, int reps);
// The draft's block of n_q = 1 .. its block size rows after ctx context rows; median of reps.
nlohmann::json bench_draft_cost(const model::Model& m, const spec::DraftModel& d, ThreadPool& pool, int64_t ctx, int reps);
// The prompt, then the scripted tokens decoded plainly and speculatively (drafts from `d`).
nlohmann::json bench_scripted(const model::Model& m, const model::RunOptions& opt, spec::Drafting& d,
                              const std::vector<int32_t>& prompt, const std::vector<int32_t>& script, int reps);
void print_spec_bench(const nlohmann::json& j);

}  // namespace k3::cli
