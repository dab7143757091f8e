// Helpers shared by the model commands (run, logits, make-tiny): id lists, thread counts, the
// built-in synthetic model in the cache directory.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "multinode/multinode.h"
#include "model/expert_store.h"
#include "model/ops.h"
#include "spec/speculator.h"
#include "vision/encoder.h"

namespace CLI {
class App;
}

namespace k3::cli {

// A whole file; throws k3::Error naming it when it cannot be read.
std::string read_text_file(const std::string& path);
// "1,2,3" -> {1,2,3}; throws k3::Error naming the bad element.
std::vector<int32_t> parse_ids(const std::string& s);
// Threads to use: the flag if > 0, else the hardware concurrency.
int pick_threads(int flag);
// --f16-rule flag value ("" = default from the CPU / K3_F16_RULE).
model::F16Rule parse_f16_rule(const std::string& s);
// Path of the built-in synthetic model ($XDG_CACHE_HOME/k3 or ~/.cache/k3), written on first use
// with a notice on stderr (under mpirun by the leader, the others waiting).
std::string builtin_model_path();
// --pp K: pipeline stages when started by mpirun (docs/multinode.md).
void add_pp_flag(CLI::App& app, int& pp);
// The "ranks" array of --json: per process {"rank","host","weight_bytes","rss_bytes","comm_seconds",
// "messages_per_token", ...} (one entry without mpirun); the counters over the span since `before`
// (multinode::stats, which every process must call: the leader asks the others).
nlohmann::json ranks_json(const std::vector<multinode::RankStats>& now, const std::vector<multinode::RankStats>& before);

// The prompt text with the image prompts of vision.md §7 in place: one per
// <|kimi_image_placeholder|> of `text` in order (their count must match), else all in front.
std::string place_images(const std::string& text, const std::vector<std::shared_ptr<const vision::ImageRows>>& images);

// Streaming routed experts from disk (model/expert_store.h): flags shared by run, bench and serve.
struct StreamFlags {
  std::string cache;    // --expert-cache SIZE | auto | off ("": stream if the mapped model does not fit)
  std::string warmup;   // --warmup uniform | TRACE
  std::string trace;    // --routing-trace FILE
  std::string policy = "freq";
  double pin = 0;
  int io_threads = 8;
  bool no_prefetch = false, no_uring = false;
  bool no_mmap = false;  // --no-mmap: the weights in anonymous memory (MappedFile::copy_to_anonymous)
  bool no_repack = false;  // --no-repack: the weights in the file's layout (Model::repack_weights)
};
void add_stream_flags(CLI::App& app, StreamFlags& f);
// The store the flags ask for, warmed up if asked, or null when the experts stay mapped: with
// --expert-cache off, or without the flag when the mapped model fits in the memory available
// (model::auto_stream; state_bytes: the command's sequence state); streaming chosen that way is
// announced on stderr in one line. With --no-mmap (which cannot go with streaming) the weights
// are moved into anonymous 2 MB pages here. Unless --no-repack, the weights of a model whose
// experts stay mapped are repacked here (Model::repack_weights); with streamed experts nothing is
// (docs/performance.md, "Lane layouts").
std::unique_ptr<model::ExpertStore> make_expert_store(model::Model& m, const StreamFlags& f, bool quiet = false,
                                                      uint64_t state_bytes = 0);

// Speculative decoding (docs/spec.md): -md/--model-draft FILE, --spec-type ngram|dspark,
// --draft-max N, --draft-min N; shared by run, chat, serve and bench.
struct SpecFlags {
  std::string draft, type;
  int draft_max = 0, draft_min = 0;
};
void add_spec_flags(CLI::App& app, SpecFlags& f);
// The draft the flags name (loaded and checked against the target, null for n-gram or none) and
// the options. Off without -md and --spec-type. K3_SPEC_KEEP=inputs|states picks how the
// target's state is put back (State::keep_rows; docs/spec.md measures both).
spec::SpecOptions spec_options(const SpecFlags& f);
struct SpecSetup {
  std::unique_ptr<spec::DraftModel> draft;
  spec::SpecOptions options;
};
SpecSetup load_spec(const model::Model& target, const SpecFlags& f);
// The "spec" object of --json outputs.
nlohmann::json spec_json(const spec::SpecStats& s, spec::SpecType type);

}  // namespace k3::cli
