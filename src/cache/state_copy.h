// What the prompt cache copies out of a model::State and back (model.md §7): the MLA rows of a
// span of positions, and a snapshot of every KDA conv window and recurrent state at one position
// with the logits of its last token. Copies only, never views of a live state: a restored state
// holds the very bits the plain path computed, so it gives bit-identical logits. Under mpirun a
// process holds its share of a state (its stage's layers, its heads), and so of each copy
// (peers.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "model/hparams.h"
#include "model/model.h"
#include "model/state.h"

namespace k3::cache {

class Peers;

// Where a sequence's state lives inside model::State: every layer (of(hp)), or the layers and
// heads a process holds (of(m), its share under mpirun).
struct Layout {
  std::vector<uint32_t> mla, kda;   // layer indices by kind
  size_t row = 0;                   // floats per MLA row: r_kv + d_pe
  size_t side = 0;                  // floats per position of State::side (a draft's context rows), or 0
  std::vector<size_t> conv, rec;    // floats per KDA layer (same order as kda)
  size_t n_vocab = 0;
  size_t logits = 0;                // floats of logits in a snapshot: n_vocab, 0 where none are kept

  static Layout of(const model::HParams& hp, size_t side_width = 0);
  // The state m's process holds; a snapshot keeps the logits when `logits` (the leader's).
  static Layout of(const model::Model& m, bool logits, size_t side_width = 0);
  // Per-position rows come in parts: each MLA layer's, then the side rows.
  size_t parts() const { return mla.size() + (side ? 1 : 0); }
  size_t width(size_t j) const { return j < mla.size() ? row : side; }
  std::vector<float>& rows_of(model::State& st, size_t j) const { return j < mla.size() ? st.layers[mla[j]].kv : st.side; }
  const std::vector<float>& rows_of(const model::State& st, size_t j) const {
    return j < mla.size() ? st.layers[mla[j]].kv : st.side;
  }
  size_t row_floats() const { return mla.size() * row + side; }  // floats per token, all parts
  size_t kda_floats() const;                              // every KDA conv + recurrent state
  size_t snapshot_floats() const { return kda_floats() + logits; }
  // The default --cache-snapshot-every: the power of two nearest to the tokens whose MLA rows weigh
  // one snapshot, in [256, 8192] (8192 at full K3 size, 2048 for make-tiny --preset medium), so
  // that snapshots inside long prompts take about as much memory as the rows they sit among.
  int64_t default_snapshot_every() const;
  uint64_t hash() const;
};

// A float buffer that is not zero-filled on allocation (snapshots are hundreds of MB at full size).
class Floats {
 public:
  Floats() = default;
  explicit Floats(size_t n) : p_(n ? new float[n] : nullptr), n_(n) {}
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(float); }

 private:
  std::unique_ptr<float[]> p_;
  size_t n_ = 0;
};

// The id under which the other processes of an mpirun job keep their share of a cached datum
// (0 alone); they drop it when this one is destroyed (peers.h).
class PeerId {
 public:
  PeerId() = default;
  explicit PeerId(Peers* peers);  // a new id
  PeerId(PeerId&& o) noexcept : peers_(std::exchange(o.peers_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  PeerId& operator=(PeerId&& o) noexcept;
  ~PeerId();
  uint64_t get() const { return id_; }

 private:
  Peers* peers_ = nullptr;
  uint64_t id_ = 0;
};

// The rows of n consecutive positions, part by part: [mla layer][n][row], then [n][side].
struct Rows {
  int64_t n = 0;
  Floats v;
  PeerId id;
  const float* layer(const Layout& l, size_t j) const { return v.data() + j * n * l.row; }
  float* layer(const Layout& l, size_t j) { return v.data() + j * n * l.row; }
};

// Every KDA layer's conv window then recurrent state after `pos` tokens, then the logits of
// token pos-1: [kda_floats() + logits].
struct Snapshot {
  int64_t pos = 0;
  Floats v;
  PeerId id;
  const float* logits(const Layout& l) const { return v.data() + l.kda_floats(); }
};

// Rows [a, b) of st's MLA caches (and side rows).
std::shared_ptr<Rows> copy_rows(const Layout& l, const model::State& st, int64_t a, int64_t b);
// Rows [off, off + n) of r.
std::shared_ptr<Rows> slice_rows(const Layout& l, const Rows& r, int64_t off, int64_t n);
// st's KDA states now, with `logits` (the last token's, n_vocab values).
std::shared_ptr<Snapshot> take_snapshot(const Layout& l, const model::State& st, std::span<const float> logits);

// st's KDA states become s's and st the sequence of s.pos tokens (its MLA caches must hold s.pos
// rows already); logits receives s's.
void apply_snapshot(const Layout& l, model::State& st, const Snapshot& s, std::vector<float>* logits);
// st becomes the sequence of s.pos tokens whose MLA rows are `pieces` (consecutive, from
// position 0) and whose KDA states are s; logits receives s's.
void restore(const Layout& l, model::State& st, std::span<const Rows* const> pieces, const Snapshot& s,
             std::vector<float>* logits);

}  // namespace k3::cache
