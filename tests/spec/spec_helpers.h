// Shared helpers of the speculative-decoding tests: the k3 binary and the numpy reference, a
// synthetic DSpark draft for a target (written by dspark_ref.py, converted by k3 convert), and one
// sequence generated plainly or speculatively with the loop `k3 run` uses.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "helpers.h"
#include "model/model.h"
#include "model/sampler.h"
#include "spec/speculator.h"

namespace k3::test {

std::string k3_bin();
std::string ref_script();  // tests/spec/dspark_ref.py
std::string join_ids(const std::vector<int32_t>& ids);

// A DSpark draft GGUF for the target at target_path (its width, vocabulary and layer count):
// dspark_ref.py writes the checkpoint into DIR=temp/<name>-hf (`extra`: more write flags), then
// `k3 convert` makes temp/<name>.gguf. Returns the GGUF path ("" after a failure, reported).
std::string make_draft(const model::Model& target, const std::string& name, const std::string& extra = "");

struct Generated {
  std::vector<int32_t> ids;
  model::State state;
  spec::SpecStats stats;
};
// Prompt in one pass, then up to n tokens; generation ends after a token of `stop` (the token is
// kept). plain: one token a pass. spec: speculative steps with `d` (its taps trace is used).
Generated generate_plain(const model::Model& m, const std::vector<int32_t>& prompt, int n, model::Sampler& s,
                         const std::vector<int32_t>& stop = {}, int threads = 1);
Generated generate_spec(const model::Model& m, spec::Drafting& d, const std::vector<int32_t>& prompt, int n,
                        model::Sampler& s, const std::vector<int32_t>& stop = {});

}  // namespace k3::test
