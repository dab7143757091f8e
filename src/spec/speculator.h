// Speculative decoding of one sequence (dspark.md §9). Each step the target verifies
// [anchor, d_0 .. d_{n-1}] in one forward pass (drafts from the DSpark draft model or from n-gram
// lookup); the drafts it agrees with are kept with one token of its own, and the state goes back
// to the last kept row (State::rewind). Greedy output is token for token plain greedy decoding's;
// sampled output has plain sampling's distribution (Sampler::verify). The caller runs the passes
// (alone, or batched with other sequences) and decides where the output stops:
//
//   Drafting d(model, draft, options, pool);      // shared by the sequences
//   Speculator sp(d, state);                      // a fresh sequence
//   sp.prompt(ids, taps rows) after each prompt pass; sp.first(id) for the token the prompt's logits gave
//   loop: ids = sp.plan(budget)                   // [anchor, drafts...]: a segment with Logits::All
//         forward (RunOptions::trace = d.taps() when drafting with DSpark)
//         e = sp.verify(logits, sampler)          // the candidates: accepted drafts, then the target's token
//         emit e[0..r) up to the first stop; sp.commit(r, taps rows of the segment)  // anchor = e[r-1]
#pragma once
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"
#include "spec/dspark.h"
#include "spec/ngram.h"
#include "spec/taps.h"
#include "tensor/threadpool.h"

namespace k3::spec {

enum class SpecType : uint8_t { None, Ngram, Dspark };
const char* spec_type_name(SpecType t);

struct SpecOptions {
  SpecType type = SpecType::None;
  int draft_max = 0;  // > 0: at most this many drafts a step; 0: chosen per step (§13)
  int draft_min = 0;  // a step with fewer drafts is a plain step
  model::KeepMode keep = model::KeepMode::Inputs;  // how the target's state is put back (State::keep_rows)
  // Drafts from here instead of n-gram lookup (tests: a known continuation, corrupted ones):
  // source(committed tokens, n, out) writes up to n drafts.
  std::function<void(std::span<const int32_t>, int64_t, std::vector<int32_t>&)> source;
};

// Counters of one sequence (or summed over many).
struct SpecStats {
  int64_t passes = 0;    // verify passes (steps with drafts)
  int64_t steps = 0;     // every step, plain ones included
  int64_t drafted = 0;   // drafts verified
  int64_t accepted = 0;  // of them, accepted
  int64_t emitted = 0;   // tokens the steps emitted
  double draft_s = 0;    // proposing (DSpark)
  std::vector<int64_t> accepted_hist;  // [m]: verify passes that accepted m drafts
  void add(const SpecStats& o);
};

// What the sequences of one model share: the draft, the options, the tap capture of a pass, and
// the measured cost of verify passes by rows (§13's choice of how many drafts pay).
class Drafting {
 public:
  // draft: the DSpark draft for SpecType::Dspark (null otherwise).
  Drafting(const model::Model& target, const DraftModel* draft, SpecOptions o, ThreadPool& pool);
  const SpecOptions& options() const { return o_; }
  bool enabled() const { return o_.type != SpecType::None; }
  const DraftModel* draft() const { return draft_; }
  const model::Model& target() const { return target_; }
  ThreadPool& pool() const { return pool_; }
  // The trace to run every pass of drafting sequences with (taps for DSpark; null otherwise).
  Taps* taps() const { return taps_.get(); }
  int cap() const { return cap_; }  // most drafts a step may take
  // A pass of `rows` rows of one sequence took `seconds` (passes that carried only it).
  void timed(int64_t rows, double seconds);
  // Expected seconds of a verify pass of b rows, relative to a plain step.
  double relative_cost(int64_t b) const;

 private:
  friend class Speculator;
  const model::Model& target_;
  const DraftModel* draft_;
  SpecOptions o_;
  ThreadPool& pool_;
  std::unique_ptr<Taps> taps_;
  int cap_ = 0;
  std::vector<double> cost_;  // [b]: EMA of pass seconds (0: not measured)
  double draft_cost_ = 0;     // EMA of a block's seconds, relative to a plain step
};

class Speculator {
 public:
  Speculator(Drafting& d, model::State& st);

  // Prompt tokens just processed by a pass (or restored from the prompt cache: taps null, the
  // state's side rows restored with it). taps: the pass's rows for them, [n][taps width].
  void prompt(std::span<const int32_t> ids, const float* taps);
  // The token sampled from the last prompt logits: the first anchor.
  void first(int32_t id);
  // The next step's tokens: [anchor, drafts...] (just the anchor for a plain step), at most
  // `budget` rows (tokens still allowed). Sets the state up to be rewound.
  const std::vector<int32_t>& plan(int64_t budget);
  // logits: [rows][n_vocab] of the pass over plan(); returns the candidates: the accepted drafts,
  // then the target's own token.
  const std::vector<int32_t>& verify(const float* logits, model::Sampler& sampler);
  // The same with the target's tokens given (a scripted continuation, benchmarks): next holds the
  // tokens after the anchor, at least as many as the planned rows.
  const std::vector<int32_t>& verify_forced(std::span<const int32_t> next);
  // The first r candidates were emitted (r >= 1): the state keeps their rows (the anchor and
  // e_0 .. e_{r-2}), the draft's context gets their taps; e_{r-1} is the next anchor.
  void commit(int64_t r, const float* taps);
  // A plain step whose token the caller chose (forced tokens): as commit(1) with that token.
  void commit_plain(int32_t id, const float* taps);
  // The state was rebuilt from its tokens by one pass (taps: its rows): the draft's context again,
  // and the planned step's rewind set up.
  void rebuilt(const float* taps);
  const std::vector<int32_t>& planned() const { return ids_; }

  const SpecStats& stats() const { return st_; }
  int64_t drafts() const { return static_cast<int64_t>(ids_.size()) - 1; }  // of the planned step

 private:
  int64_t choose(int64_t budget) const;  // §13
  Drafting& d_;
  model::State& state_;
  NgramIndex ngram_;
  std::vector<int32_t> ids_, cand_, drafts_;
  std::vector<double> accept_;  // [j]: EMA of P(draft j accepted | drafts before it were)
  int64_t m_ = 0, plain_run_ = 0;
  bool dspark_ = false;  // the draft's context is whole (else n-gram drafts)
  SpecStats st_;
};

}  // namespace k3::spec
