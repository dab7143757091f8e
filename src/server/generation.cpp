#include "server/generation.h"

namespace k3::server {

Generation::Generation(Engine& engine, const tok::Tokenizer& tok, GenRequest req, std::vector<std::string> stops,
                       bool keep_markers)
    : engine_(engine),
      task_(std::make_shared<Task>(std::move(req))),
      detok_(tok, keep_markers),
      stops_(std::move(stops)) {}

Generation::~Generation() { engine_.cancel(task_); }

Engine::Admit Generation::submit() { return engine_.submit(task_); }

Generation::Piece Generation::poll(std::chrono::milliseconds wait) {
  Piece p;
  if (done_) {
    p.done = true;
    return p;
  }
  std::vector<int32_t> ids;
  const bool ended = task_->take(ids, wait);
  for (int32_t id : ids) {
    ++n_gen_;
    p.ids.push_back(id);
    p.text += stops_.push(detok_.push(id));
    if (stops_.hit()) break;
  }
  if (!stops_.hit() && ended) {
    p.text += stops_.push(detok_.flush());
    if (!stops_.hit()) p.text += stops_.flush();
  }
  if (stops_.hit()) {
    stop_hit_ = true;
    task_->cancel();
    done_ = true;
    finish_ = Finish::Eog;
  } else if (ended) {
    done_ = true;
    finish_ = task_->finish();
  }
  p.done = done_;
  return p;
}

std::string Generation::error() const {
  if (finish_ == Finish::Cancelled) return "the generation was cancelled (the server is shutting down)";
  return "generation failed: " + task_->error();
}

const char* Generation::finish_reason() const {
  return finish_ == Finish::Length || finish_ == Finish::Context ? "length" : "stop";
}

}  // namespace k3::server
