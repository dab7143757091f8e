// Per-sequence state (model.md §7), kept apart from the immutable model: the MLA latent cache of
// every MLA layer and the conv + recurrent state of every KDA layer. A model can serve any number
// of sequences, each with its own State.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/hparams.h"
#include "model/weights.h"

namespace k3 {
class ThreadPool;
}

namespace k3::model {

// What a KDA layer records of a pass so that State::rewind can put it back to after any of the
// pass's tokens (State::keep_rows): the conv state before the pass and its projected conv inputs
// [3 (q,k,v)][n][D]; then either (Inputs) the recurrent state before the pass and what the
// recurrence consumed per token, q and k normalised, v, the decay g before exp [n][D] and beta
// [n][n_head], or (States) the recurrent state after each token but the last [n-1][rec].
struct KdaJournal {
  std::vector<float> conv0, proj;
  std::vector<float> rec0, q, k, v, g, beta;  // Inputs
  std::vector<float> recs;                    // States
};

enum class KeepMode : uint8_t { Inputs, States };

struct LayerState {
  // KDA (§7.1, §7.2)
  std::vector<float> conv;  // [3 (q,k,v)][D][K_conv-1], tap index fastest, oldest first
  std::vector<float> rec;   // [n_head][d (value j)][d (key i)]: S_h[i][j] at h*d*d + j*d + i
  // MLA (§7.3)
  std::vector<float> kv;    // [n_past][r_kv + d_pe]: rows [c_hat | k_pe], F32
  KdaJournal journal;       // State::keep_rows
};

// Told when a state is copied or ends, by whoever keeps the other parts of the states elsewhere
// (the other processes of a multi-process run, src/multinode). Calls may come from any thread.
class StateMirror {
 public:
  virtual ~StateMirror() = default;
  virtual uint64_t created() = 0;                        // a new state: its id
  virtual void copied(uint64_t from, uint64_t to) = 0;  // state `to` now holds what `from` holds
  virtual void dropped(uint64_t id) = 0;
};

// Floats of one layer's state: KDA conv window and recurrent state (this process's heads), MLA row
// width; zeros for a layer another process holds (its pipeline stage's).
struct LayerDims {
  size_t conv = 0, rec = 0, kv_row = 0;  // floats
  size_t head_dim = 0;                   // KDA d
};
std::vector<LayerDims> state_dims(const HParams& hp, const Weights& w);

class State {
 public:
  // The state of the layers this process holds (weights bound by the loader: its pipeline stage,
  // its heads), for up to n_ctx tokens. Model::new_state is the usual way to make one.
  State(const HParams& hp, const Weights& w, int64_t n_ctx, StateMirror* mirror = nullptr);
  // The whole state of every layer (one process holding the whole model), without a model.
  State(const HParams& hp, int64_t n_ctx);
  State(const State& o);
  State(State&& o) noexcept;
  State& operator=(const State& o);
  State& operator=(State&& o) noexcept;
  ~State();

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  uint64_t id() const { return id_; }  // its mirror's id (0 without a mirror)
  void reset();  // back to an empty sequence (zeros, empty caches)
  // For a restore from a snapshot (src/cache): the caller has filled `layers` for a sequence of n
  // tokens (every MLA cache exactly n rows, the KDA states after token n); throws if they do not fit.
  void set_n_past(int64_t n);

  // Taking back tokens (speculative decoding, src/spec). After keep_rows(n), every pass of at most
  // n tokens of this sequence records what rewind() needs (KdaJournal; a longer pass records
  // nothing); rewind(pos) then makes this the state after position pos - 1 of the last pass
  // (n_past() - pass tokens < pos <= n_past()): KDA states bit for bit those a pass over just
  // those tokens leaves, MLA and side rows past pos dropped. keep_rows(0) stops recording.
  void keep_rows(int64_t n, KeepMode mode = KeepMode::Inputs);
  int64_t kept_rows() const { return keep_; }
  KeepMode keep_mode() const { return keep_mode_; }
  // The journal of layer il for a pass of n tokens, or null when this pass records nothing.
  KdaJournal* journal(uint32_t il, int64_t n) { return keep_ >= n ? &layers[il].journal : nullptr; }
  void rewind(int64_t pos, ThreadPool& pool);

  // Side rows: side_width() floats per position that another component keeps with this sequence
  // (a draft model's context rows, src/spec), position-major. Their owner appends them; rewind()
  // and reset() cut them with the MLA rows, copies and the prompt cache carry them.
  void set_side_width(size_t w);
  size_t side_width() const { return side_w_; }
  int64_t side_rows() const { return side_w_ ? static_cast<int64_t>(side.size() / side_w_) : 0; }
  std::vector<float> side;

  std::vector<LayerState> layers;

  // For tests: largest absolute difference over every state value (inf if shapes differ).
  static double max_abs_diff(const State& a, const State& b);

 private:
  friend class Model;
  std::vector<LayerDims> dims_;  // per layer (zeros: a layer another process holds)
  int64_t n_ctx_;
  int64_t n_past_ = 0;
  int64_t pass_ = 0;  // tokens of the last pass (Model::forward), for rewind()
  int64_t keep_ = 0;
  KeepMode keep_mode_ = KeepMode::Inputs;
  size_t side_w_ = 0;
  StateMirror* mirror_ = nullptr;
  uint64_t id_ = 0;
};

// Bytes of one sequence's state at a full context of n_ctx tokens (KDA states + MLA rows).
uint64_t state_bytes(const HParams& hp, int64_t n_ctx);

// A segment of a batch as the layers see it: rows [row0, row0+n) of the batch's activations are
// the tokens at positions n_past .. n_past+n-1 of `state`.
struct SegRows {
  State* state;
  int64_t n_past, row0, n;
};
// Rows of a batch made of consecutive segments.
inline int64_t batch_rows(std::span<const SegRows> segs) { return segs.empty() ? 0 : segs.back().row0 + segs.back().n; }

}  // namespace k3::model
