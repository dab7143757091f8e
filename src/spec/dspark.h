// The DSpark draft model (dspark.md §5-§8), loaded beside a target whose output head (and token
// embedding, when the draft has none) it shares. Its context rows — per committed position and
// draft layer the row [c_hat | k_hat] of §5 — live in the target State's side rows
// (State::side, position-major: [pos][layer][row]), so they are cut back, copied and cached with
// the sequence. The draft never changes what is emitted, only how many tokens a pass yields.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/ops.h"
#include "spec/draft_file.h"

namespace k3::spec {

class DraftModel {
 public:
  // Opens and checks the draft, and its fit to the target (§3.4) for blocks of up to `block` rows.
  static std::unique_ptr<DraftModel> load(const std::string& path, const model::Model& target, uint32_t block);

  const DraftParams& params() const { return p_; }
  const DraftWeights& weights() const { return w_; }
  const std::vector<uint32_t>& taps() const { return p_.taps; }
  size_t side_width() const { return static_cast<size_t>(p_.n_layer) * p_.row(); }  // floats per position
  uint64_t step_bytes() const;
  std::string identity() const;  // name, path and size, for the prompt cache's identity  // weights one block reads (layers, context_proj, markov_w2, the target's head)

  // §5: the context rows of n committed positions pos0.. from their taps [n][taps * H], appended
  // to side (which holds pos0 positions' rows).
  void add_context(model::Ctx& ctx, const float* taps, int64_t n, int64_t pos0, std::vector<float>& side) const;

  // §6-§8: n_q proposals for the anchor at position p = the positions side holds. With dbg, also
  // the final normed hidden rows [n_q][H] and the base logits [n_q][V] (before the Markov bias).
  struct Debug {
    std::vector<float> hidden, base;
  };
  void propose(model::Ctx& ctx, const std::vector<float>& side, int32_t anchor, int64_t n_q, std::vector<int32_t>& out,
               Debug* dbg = nullptr) const;

 private:
  DraftModel() = default;
  void rope(float* v, int64_t pos) const;  // §7, in place over d_rope values
  gguf::Model file_;
  DraftParams p_;
  DraftWeights w_;
  const model::Model* target_ = nullptr;
  std::vector<double> omega_;  // §7 frequencies
  float mscale_ = 1.0f, kappa_ = 1.0f;
};

}  // namespace k3::spec
