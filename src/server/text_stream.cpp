#include "server/text_stream.h"

#include <algorithm>

namespace k3::server {

static bool is_marker(std::string_view s) {
  return s == "<|open|>" || s == "<|close|>" || s == "<|sep|>" || s == "<|end_of_msg|>";
}

Detokenizer::Detokenizer(const tok::Tokenizer& tok, bool keep_markers)
    : tok_(tok), keep_markers_(keep_markers), dec_(tok, false) {}

std::string Detokenizer::push(int32_t id) {
  if (id < 0 || id >= tok_.n_vocab()) return {};
  if (!tok_.hidden(id) && !tok_.is_special(id)) return dec_.push(id);
  if (keep_markers_ && is_marker(tok_.piece(id))) return dec_.flush() + tok_.piece(id);
  if (!tok_.hidden(id)) return dec_.push(id);  // user-defined tokens are ordinary text
  return {};
}

std::string Detokenizer::flush() { return dec_.flush(); }

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
               stops_.end());
}

std::string StopMatcher::push(std::string_view text) {
  if (hit_) return {};
  if (stops_.empty()) return std::string(text);
  pending_.append(text);
  // Earliest full occurrence of any stop string.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t p = pending_.find(s);
    if (p < best) best = p, matched_ = s;
  }
  if (best != std::string::npos) {
    hit_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t max_k = std::min(s.size() - 1, pending_.size());
    for (size_t k = max_k; k > keep; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!hit_) out.swap(pending_);
  return out;
}

}  // namespace k3::server
