// Plans sized to a byte budget (k3 quantize --target-size): every tensor group that no rule pins
// — one routed-expert matrix of a layer (gate, up or down), a layer's attention, its shared
// experts, its dense or latent FFN, the embedding, the LM head — gets the type among the
// candidates that keeps the model's expected output error smallest while the file fits.
//
// Error of a candidate: the tensors' own rows quantized and dequantized, Σ_c I_c (x_c − x̂_c)² per
// row (I_c the importance of column c from the imatrix, 1 without one), which is the expected
// squared error the row adds to its product's output; rows are sampled evenly (the same rows for
// every candidate) and scaled to the whole tensor, expert matrices weighted by how often the
// router picks them (the imatrix's counts, else k/E), embedding rows by 1/n_vocab (a token reads
// one), and every tensor by how much of the logits its error reaches (the LM head and embedding
// most, a block more the earlier it sits: target_size.cpp, reach). The choice: each group's candidates reduced to their lower convex hull in (bytes, error),
// then the upgrade with the largest error saved per byte is taken while it fits, and whatever
// budget is left goes to the single upgrade that saves the most. Deterministic for the same inputs.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quantize/imatrix.h"
#include "quantize/recipe.h"

namespace k3::quant {

struct SizeOptions {
  uint64_t target_bytes = 0;  // the whole output (every part), metadata included
  const Imatrix* imatrix = nullptr;
  int threads = 1;
  int64_t sample_rows = 128;  // rows measured per tensor (every row of a smaller one)
  // Called as each tensor's measurement completes: (tensors done, tensors, elements measured so far).
  std::function<void(size_t, size_t, uint64_t)> progress;
};

struct SizeCandidate {
  GgmlType type;       // as asked; tensors whose rows it does not divide take its fallback
  uint64_t bytes = 0;  // the group's tensors in it
  double err = 0;      // expected squared output error (see above)
};

struct SizeGroup {
  std::string name;              // "blk.3.ffn_gate_exps", "blk.3.attn", "token_embd", ...
  std::vector<size_t> tensors;   // indices into the plan
  std::vector<SizeCandidate> candidates;  // by bytes; dominated ones removed
  size_t chosen = 0;
};

struct SizedPlan {
  Plan plan;                        // the final plan: every tensor's type
  std::vector<UserRule> rules;      // the user's rules, then one per sized tensor ("^name$=type")
  std::vector<SizeGroup> groups;
  std::vector<GgmlType> candidates;           // the types considered
  std::vector<GgmlType> need_imatrix;         // left out: they need an importance matrix
  uint64_t fixed_bytes = 0;   // kept and pinned tensors
  uint64_t overhead_bytes = 0;  // metadata and alignment (estimated from the input)
  uint64_t min_bytes = 0;       // the smallest file any mix gives
  uint64_t file_bytes = 0;      // predicted output size
  double err = 0;               // the chosen mix's total error
};

// The candidate types: every type k3 writes except the legacy 32-blocks (fallbacks only) and F32,
// those that need an importance matrix only when one is given.
std::vector<GgmlType> size_candidates(bool have_imatrix, std::vector<GgmlType>* need_imatrix = nullptr);

// Plans `in` for the budget. `rules` pin what they match (they come first in the final plan).
// Throws k3::Error, before anything is written, when even the smallest mix exceeds the budget
// (naming that size).
SizedPlan size_plan(const gguf::Model& in, const std::vector<UserRule>& rules, const SizeOptions& opt);

// The plan's rules as a file `--tensor-type-file` reads back: the budget and sizes as comments,
// then one REGEX=TYPE per line.
std::string rules_text(const SizedPlan& sp, const std::string& input);
// Reads REGEX=TYPE lines (blank lines and lines starting with '#' skipped); errors name the line.
std::vector<std::string> read_rules_file(const std::string& path);

}  // namespace k3::quant
