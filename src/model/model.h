// The Kimi-K3 model (model.md §6): immutable (hyperparameters + memory-mapped weights), shared by
// any number of sequences, each with its own State. forward() runs a batch of consecutive tokens
// of one sequence (prefill) or a single token (decode); both give the same results.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/hparams.h"
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

class Model {
 public:
  // Opens, validates (keys, schedule, every tensor's presence, shape and type) and maps a GGUF.
  static std::unique_ptr<Model> load(const std::string& path);

  const HParams& hparams() const { return hp_; }
  const Weights& weights() const { return w_; }
  const gguf::Metadata& meta() const { return file_.meta(); }
  const gguf::Model& file() const { return file_; }
  int32_t n_vocab() const { return static_cast<int32_t>(hp_.n_vocab); }

  State new_state(int64_t n_ctx) const { return State(hp_, n_ctx); }

  // Runs ids[0..T) at positions st.n_past() .. +T through every layer, updating st. logits
  // receives [rows][n_vocab] for the last token (Last) or every token (All). Throws k3::Error for
  // an id outside the vocabulary or when the context (st.n_ctx()) would be exceeded; st is left
  // unchanged then.
  void forward(State& st, const int32_t* ids, int64_t T, const RunOptions& opt, Logits want,
               std::vector<float>* logits) const;

  // forward() in chunks of at most n_batch tokens; logits as above (All: every token).
  void prefill(State& st, const std::vector<int32_t>& ids, int64_t n_batch, const RunOptions& opt, Logits want,
               std::vector<float>* logits) const;

 private:
  Model() = default;
  gguf::Model file_;
  HParams hp_;
  Weights w_;
};

}  // namespace k3::model
