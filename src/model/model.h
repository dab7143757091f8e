// The Kimi-K3 model (model.md §6): immutable (hyperparameters + memory-mapped weights), shared by
// any number of sequences, each with its own State. forward() runs one batch made of segments,
// each a run of consecutive tokens of one sequence (a prompt chunk, or one token when decoding):
// every matrix product runs once over all rows of the batch, the per-sequence parts (KDA conv and
// recurrence, MLA cache and attention) per segment on its own state. A segment's results do not
// depend on what else is in the batch, nor on how its sequence is cut into segments.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mmap.h"
#include "gguf/gguf.h"
#include "model/group.h"
#include "model/hparams.h"
#include "model/input_rows.h"
#include "model/ops.h"
#include "model/state.h"
#include "model/weights.h"

namespace k3::model {

class Trace;
class MatmulObserver;
class ExpertSource;

struct RunOptions {
  ThreadPool* pool = nullptr;         // required
  F16Rule f16_rule = F16Rule::Round;  // see ops.h; Model::load sets the default from the CPU
  Trace* trace = nullptr;             // named intermediates (debug)
  MatmulObserver* observer = nullptr; // every matrix product's input (imatrix)
  ExpertSource* experts = nullptr;     // routed experts streamed from disk (expert_store.h); null: mapped
};

enum class Logits : uint8_t { None, Last, All };

// One sequence's part of a batch: ids[0..n) at positions state->n_past() .. +n. logits receives
// [rows][n_vocab] for its last token (Last) or every token (All); untouched for None. rows replace
// the embeddings of some of the tokens (input_rows.h; positions relative to ids[0]).
struct Segment {
  State* state = nullptr;
  const int32_t* ids = nullptr;
  int64_t n = 0;
  Logits want = Logits::None;
  std::vector<float>* logits = nullptr;
  std::span<const InputRows> rows = {};
};

// A batch was refused because of one segment (id outside the vocabulary, context exceeded, empty,
// a state given twice); no state was changed.
class SegmentError : public Error {
 public:
  SegmentError(size_t segment, const std::string& msg) : Error(msg), segment(segment) {}
  size_t segment;
};

class Model {
 public:
  // Opens, validates (keys, schedule, every tensor's presence, shape and type) and maps a GGUF.
  // With a group (several processes running the model together, group.h) only this process's
  // share is bound and read (placement.h), and forward() works with the others.
  static std::unique_ptr<Model> load(const std::string& path, Group* group = nullptr);

  const HParams& hparams() const { return hp_; }
  const Weights& weights() const { return w_; }
  const gguf::Metadata& meta() const { return file_.meta(); }
  const gguf::Model& file() const { return file_; }
  int32_t n_vocab() const { return static_cast<int32_t>(hp_.n_vocab); }

  State new_state(int64_t n_ctx) const { return State(hp_, w_, n_ctx, group_ ? group_->states() : nullptr); }
  Group* group() const { return group_; }
  LayerRange layers() const { return layers_; }  // the layers this process holds
  uint64_t weight_bytes() const { return weight_bytes_; }  // bytes of the weights it holds

  // Rewrites the weight matrices this process holds into the kernels' faster layouts
  // (tensor/repack.h) in anonymous memory (2 MB pages where the kernel gives them) and lets their
  // pages of the mapping go (the page cache keeps them); Q2_K matrices that become Q2_K_SB keep
  // their bytes in place. Results change only there: to the order of llama.cpp's AVX-512 builds,
  // which repack Q2_K as their loader does (unless --no-repack, in both engines); and for Q4_K,
  // whose lanes layout (Q4_K_LANES) adds the same integer sums in an order of its own. The token
  // embedding stays (one row is read a token), and so does a matrix whose values the layout cannot
  // hold (repackable). Not for a model whose experts an ExpertStore serves (it refuses repacked
  // stacks). Call once, before any forward(); returns the bytes repacked.
  size_t repack_weights();

  // Runs every segment through every layer, updating each segment's state. Throws SegmentError
  // (the message names the segment when there are several) for an id outside the vocabulary or
  // when a state's context (n_ctx()) would be exceeded; every state is left unchanged then.
  void forward(std::span<const Segment> batch, const RunOptions& opt) const;
  // The batch of one segment: ids[0..T) of the sequence st.
  void forward(State& st, const int32_t* ids, int64_t T, const RunOptions& opt, Logits want,
               std::vector<float>* logits) const;

  // forward() in chunks of at most n_batch tokens; logits as above (All: every token); rows as in
  // a Segment, relative to ids[0]; each_pass(first, n) after the pass over ids[first, first + n).
  void prefill(State& st, const std::vector<int32_t>& ids, int64_t n_batch, const RunOptions& opt, Logits want,
               std::vector<float>* logits, std::span<const InputRows> rows = {},
               const std::function<void(int64_t, int64_t)>& each_pass = nullptr) const;

 private:
  Model() = default;
  // One pipeline pass over the batch's rows, cut into micro-batches when there are later stages.
  void run(std::span<const Segment> batch, std::span<const SegRows> segs, const RunOptions& opt) const;
  gguf::Model file_;
  HParams hp_;
  Weights w_;
  Group* group_ = nullptr;
  LayerRange layers_;
  uint64_t weight_bytes_ = 0;
  std::unique_ptr<AnonymousRegion> repacked_;  // repack_weights()
};

}  // namespace k3::model
