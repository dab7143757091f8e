// `k3 serve`: an OpenAI-compatible HTTP server over one Kimi-K3 model (docs/server.md).
//
//   k3::server::Server s(opts);      // loads model, tokenizer, chat template; starts the engine
//   int port = s.bind();             // host:port (port 0: any free port)
//   std::thread t([&] { s.run(); });
//   ...; s.shutdown();                // graceful: finish or cancel in-flight requests, then stop
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "model/expert_store.h"
#include "model/sampler.h"
#include "server/http_server.h"
#include "spec/speculator.h"

namespace k3::cache {
class Peers;
}

namespace k3::server {

struct ServerOptions {
  std::string model_path;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string alias;          // model id reported by /v1/models (default: general.name or the file name)
  int64_t n_ctx = 0;          // context per slot (0: min(training context, 4096))
  int parallel = 1;           // slots
  int queue = -1;             // requests waiting for a slot (-1: 8 x parallel); beyond: 503
  int threads = 0;            // model threads (0: all cores)
  int64_t n_batch = 256;      // prompt tokens per forward call
  int32_t max_tokens = 0;     // cap on max_tokens (0: the context size)
  std::string api_key;        // empty: no authentication
  std::string template_file;  // overrides the GGUF's chat template (default: k3's built-in K3 template)
  std::string mmproj;         // vision tower (image_url parts); empty: text only
  uint64_t image_max_pixels = 0;  // 0: vision::kDefaultMaxPixels
  uint32_t image_max_tokens = 0;  // rows per image (0: the mmproj's patch limit)
  std::string f16_rule;       // "" (from the CPU), "amx" or "round"
  bool test_canned = false;   // accept the test-only k3_canned request field
  std::string test_script;    // tests only: the model's outputs, one entry per generation (test_script.h)
  int max_json_depth = 64;
  size_t max_stops = 16;
  double shutdown_grace_s = 10;  // on shutdown, in-flight requests get this long to finish
  model::SamplerParams sampling{0.8f, 40, 0.95f, 0.05f, 0};  // defaults for fields a request omits
  HttpLimits http;
  // Prompt cache (src/cache): --cache-ram (auto, 0 = off, or a size), --cache-dir, --cache-disk,
  // --cache-snapshot-every; --slot-save-path enables slot save/restore; -v logs debug lines.
  std::string cache_ram = "auto", cache_dir, cache_disk = "auto", slot_save_path;
  int64_t cache_snapshot_every = 0;  // 0: from the model (cache::Layout::default_snapshot_every)
  bool verbose = false;
  // Speculative decoding (src/spec): the options and the DSpark draft GGUF ("" for n-gram or none).
  spec::SpecOptions spec;
  std::string draft_path;
  // Streams routed experts from disk when set (k3 serve --expert-cache): called once with the model.
  // state_bytes: every slot's state at the full context. May return null (experts stay mapped).
  std::function<std::unique_ptr<model::ExpertStore>(model::Model&, uint64_t state_bytes)> make_experts;
  // Loads the model when set (k3 serve under mpirun: this process's share), else Model::load.
  std::function<std::unique_ptr<model::Model>(const std::string&)> load_model;
  // Under mpirun, the other processes' shares of the prompt cache, once the model is loaded (null: alone).
  std::function<cache::Peers*()> cache_peers;
};

struct ServerCtx;

class Server {
 public:
  explicit Server(const ServerOptions& opts);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int bind();  // throws k3::Error when the address cannot be bound
  void run();  // serves until shutdown()
  // Stops accepting generation requests (503), lets in-flight ones finish for up to
  // shutdown_grace_s, cancels the rest, then closes the listener and every connection.
  // Thread-safe and idempotent; returns when run() can return.
  void shutdown();

  const std::string& model_id() const;
  std::string describe() const;  // one line: model, context, slots, template

 private:
  void routes();
  std::unique_ptr<ServerCtx> c_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace k3::server
