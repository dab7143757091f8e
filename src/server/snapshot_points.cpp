#include "server/snapshot_points.h"

#include "chat/chat_template.h"

namespace k3::server {

std::vector<int64_t> token_positions(const tok::Tokenizer& tok, const std::vector<int32_t>& ids,
                                     const std::string& text, const std::vector<size_t>& offsets) {
  size_t total = 0;
  for (int32_t id : ids) total += tok.piece(id).size();
  if (total != text.size()) return {};
  std::vector<int64_t> out;
  size_t bytes = 0, k = 0;
  for (size_t i = 0; i <= ids.size() && k < offsets.size(); ++i) {
    // `bytes` is where token i starts; an offset inside token i maps to i (the whole tokens before it)
    const size_t next = i < ids.size() ? bytes + tok.piece(ids[i]).size() : SIZE_MAX;
    while (k < offsets.size() && offsets[k] < next) {
      if (i > 0 && (out.empty() || out.back() != static_cast<int64_t>(i))) out.push_back(static_cast<int64_t>(i));
      ++k;
    }
    bytes = next;
  }
  return out;
}

std::vector<int64_t> message_snapshot_points(const jinja::Template& t, const nlohmann::ordered_json& inputs,
                                             const std::string& prompt, const std::vector<int32_t>& ids,
                                             const tok::Tokenizer& tok) {
  return token_positions(tok, ids, prompt, chat::message_starts(t, inputs, prompt));
}

}  // namespace k3::server
