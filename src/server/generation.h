// One generation as an HTTP handler drives it: submits a Task, then turns the ids that arrive
// into client text (detokenizer, stop strings) and keeps the counts the response reports.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/engine.h"
#include "server/text_stream.h"

namespace k3::server {

class Generation {
 public:
  // keep_markers: K3 structural special tokens stay in the text (for the chat parser).
  Generation(Engine& engine, const tok::Tokenizer& tok, GenRequest req, std::vector<std::string> stops,
             bool keep_markers);
  ~Generation();  // cancels the task if it is still running

  Engine::Admit submit();

  struct Piece {
    std::string text;
    std::vector<int32_t> ids;
    bool done = false;
  };
  // Waits up to `wait` for progress. After done, further calls return nothing.
  Piece poll(std::chrono::milliseconds wait);
  void cancel() { engine_.cancel(task_); }
  // Waits up to `wait` for a slot; false while the request is still queued.
  bool wait_started(std::chrono::milliseconds wait) { return task_->wait_started(wait); }

  // After done:
  bool failed() const { return finish_ == Finish::Error || (finish_ == Finish::Cancelled && !stop_hit_); }
  std::string error() const;
  bool hit_stop_string() const { return stop_hit_; }
  const std::string& stop_string() const { return stops_.matched(); }
  Finish finish() const { return finish_; }
  // OpenAI finish_reason: "stop" (end of generation or a stop string) or "length".
  const char* finish_reason() const;
  int32_t n_prompt() const { return static_cast<int32_t>(task_->request().prompt.size()); }
  int32_t n_gen() const { return n_gen_; }
  // Prompt tokens restored from the prompt cache instead of processed (usage.prompt_tokens_details.
  // cached_tokens, llama.cpp's cache_n); known once the generation has started.
  int32_t n_cached() const { return task_->times().n_cached; }
  TaskTimes times() const { return task_->times(); }

 private:
  Engine& engine_;
  std::shared_ptr<Task> task_;
  Detokenizer detok_;
  StopMatcher stops_;
  bool done_ = false, stop_hit_ = false;
  Finish finish_ = Finish::None;
  int32_t n_gen_ = 0;
};

}  // namespace k3::server
