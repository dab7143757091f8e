// Where a chat prompt's prefill should stop for prompt-cache snapshots: the token positions where
// its messages start (chat::message_starts), so that a later request that changes or drops a
// message loses at most that message's tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja.h"
#include "tokenizer/tokenizer.h"

namespace k3::server {

// Token positions for byte offsets of `text` = the concatenated pieces of `ids`: for each offset,
// the number of whole tokens before it. Empty if the pieces do not spell the text.
std::vector<int64_t> token_positions(const tok::Tokenizer& tok, const std::vector<int32_t>& ids,
                                     const std::string& text, const std::vector<size_t>& offsets);

std::vector<int64_t> message_snapshot_points(const jinja::Template& t, const nlohmann::ordered_json& inputs,
                                             const std::string& prompt, const std::vector<int32_t>& ids,
                                             const tok::Tokenizer& tok);

}  // namespace k3::server
