// Per-sequence state (model.md §7), kept apart from the immutable model: the MLA latent cache of
// every MLA layer and the conv + recurrent state of every KDA layer. A model can serve any number
// of sequences, each with its own State.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/hparams.h"

namespace k3::model {

struct LayerState {
  // KDA (§7.1, §7.2)
  std::vector<float> conv;  // [3 (q,k,v)][D][K_conv-1], tap index fastest, oldest first
  std::vector<float> rec;   // [n_head][d (value j)][d (key i)]: S_h[i][j] at h*d*d + j*d + i
  // MLA (§7.3)
  std::vector<float> kv;    // [n_past][r_kv + d_pe]: rows [c_hat | k_pe], F32
};

class State {
 public:
  State(const HParams& hp, int64_t n_ctx);
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  void reset();  // back to an empty sequence (zeros, empty caches)
  // For a restore from a snapshot (src/cache): the caller has filled `layers` for a sequence of n
  // tokens (every MLA cache exactly n rows, the KDA states after token n); throws if they do not fit.
  void set_n_past(int64_t n);

  std::vector<LayerState> layers;

  // For tests: largest absolute difference over every state value (inf if shapes differ).
  static double max_abs_diff(const State& a, const State& b);

 private:
  friend class Model;
  HParams hp_;
  int64_t n_ctx_;
  int64_t n_past_ = 0;
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
