// Helpers shared by the model commands (run, logits, make-tiny): id lists, thread counts, the
// built-in synthetic model in the cache directory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/ops.h"

namespace k3::cli {

// "1,2,3" -> {1,2,3}; throws k3::Error naming the bad element.
std::vector<int32_t> parse_ids(const std::string& s);
// Threads to use: the flag if > 0, else the hardware concurrency.
int pick_threads(int flag);
// --f16-rule flag value ("" = default from the CPU / K3_F16_RULE).
model::F16Rule parse_f16_rule(const std::string& s);
// Path of the built-in synthetic model ($XDG_CACHE_HOME/k3 or ~/.cache/k3), written on first use
// with a notice on stderr.
std::string builtin_model_path();

}  // namespace k3::cli
