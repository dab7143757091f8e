// k3 serve: the OpenAI-compatible HTTP server (docs/server.md).
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <sys/resource.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include "multinode/multinode.h"
#include "server/server.h"

using namespace k3;

static int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a Kimi-K3 model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
               "/completion, /v1/models, /health, /metrics, /tokenize, /detokenize).",
               "k3 serve"};
  server::ServerOptions o;
  int http_threads = 0, pp = 1;
  double max_body_mb = 8, max_inflight_mb = 0;
  app.add_option("-m,--model", o.model_path, "GGUF model")->required();
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "port (0: any free port, printed on stderr)")->capture_default_str();
  app.add_option("--alias", o.alias, "model id reported by /v1/models (default: general.name)");
  app.add_option("-c,--ctx", o.n_ctx, "context size of each slot (default: min(training context, 4096))");
  app.add_option("-P,--parallel", o.parallel, "sequences generated at once (slots)")->capture_default_str();
  app.add_option("--queue", o.queue, "requests that may wait for a slot; beyond that 503 (default: 8 x parallel)");
  app.add_option("-t,--threads", o.threads, "model threads (default: all cores)");
  app.add_option("-b,--batch", o.n_batch, "prompt tokens per forward pass")->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "largest max_tokens a request may ask for (default: the context size)");
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (default: $K3_API_KEY if set)");
  app.add_option("--chat-template-file", o.template_file, "Jinja chat template overriding the model's");
  app.add_option("--mmproj", o.mmproj, "vision mmproj GGUF: accept image_url parts (data URLs) in chat messages");
  app.add_option("--image-max-pixels", o.image_max_pixels, "refuse images with more pixels (default 67108864)");
  app.add_option("--image-max-tokens", o.image_max_tokens, "largest number of rows per image (default: the mmproj's patch limit)");
  app.add_option("--f16-rule", o.f16_rule, "amx | round (default: from the CPU)");
  app.add_option("--temp", o.sampling.temp, "default temperature")->capture_default_str();
  app.add_option("--top-k", o.sampling.top_k, "default top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", o.sampling.top_p, "default top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", o.sampling.min_p, "default min-p (0: off)")->capture_default_str();
  app.add_option("--max-body-mb", max_body_mb, "largest request body in MiB (larger: 413)")->capture_default_str();
  app.add_option("--timeout", o.http.request_timeout_s, "seconds a client has to send a whole request")
      ->capture_default_str();
  app.add_option("--idle-timeout", o.http.idle_timeout_s, "keep-alive: seconds to wait for the next request")
      ->capture_default_str();
  app.add_option("--http-threads", http_threads,
                 "handler threads: requests handled at once (default: parallel + queue + 16); idle and slow "
                 "connections take none");
  app.add_option("--max-connections", o.http.max_connections, "open connections in all; beyond that 503")
      ->capture_default_str();
  app.add_option("--max-connections-per-ip", o.http.max_connections_per_ip,
                 "open connections from one address; beyond that 503 (0: no limit)")
      ->capture_default_str();
  app.add_option("--max-inflight-mb", max_inflight_mb,
                 "request body MiB being read or handled at once, summed; beyond that 503 (default: 8 x max-body-mb)");
  app.add_option("--shutdown-grace", o.shutdown_grace_s, "on SIGINT/SIGTERM, seconds in-flight requests may finish")
      ->capture_default_str();
  app.add_option("--cache-ram", o.cache_ram,
                 "prompt cache budget in RAM (K/M/G); 0 turns reuse across requests off; auto: half the memory "
                 "left after the model and the slots")
      ->capture_default_str();
  app.add_option("--cache-dir", o.cache_dir, "prompt cache on disk: entries evicted from RAM and every prompt end "
                                             "(reused after a restart; servers of one model may share it)");
  app.add_option("--cache-disk", o.cache_disk, "budget of --cache-dir (auto: half its free space)")->capture_default_str();
  app.add_option("--cache-snapshot-every", o.cache_snapshot_every,
                 "also snapshot the KDA states every N prompt tokens (default: the power of two nearest to the "
                 "tokens whose MLA rows weigh one snapshot, in 256..8192; 8192 at full K3 size)");
  app.add_option("--slot-save-path", o.slot_save_path, "directory for POST /slots/{id}?action=save|restore");
  app.add_flag("-v,--verbose", o.verbose, "debug lines on stderr (where each prompt left the prompt cache)");
  app.add_flag("--test-canned", o.test_canned,
               "TESTS ONLY: accept the k3_canned request field, which makes the model emit given text or ids");
  app.add_option("--test-script", o.test_script,
                 "TESTS ONLY: a JSON array of model outputs, one per generation request in order (docs/server.md)");
  cli::StreamFlags stream;
  cli::add_stream_flags(app, stream);
  cli::SpecFlags specf;
  cli::add_spec_flags(app, specf);
  cli::add_pp_flag(app, pp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.spec = cli::spec_options(specf);
  o.draft_path = specf.draft;
  if (o.api_key.empty())
    if (const char* k = std::getenv("K3_API_KEY"); k && *k) o.api_key = k;
  if (o.parallel < 1) fail("--parallel must be >= 1");
  if (o.cache_snapshot_every < 0) fail("--cache-snapshot-every must be >= 0");
  if (!o.slot_save_path.empty() && ::access(o.slot_save_path.c_str(), W_OK | X_OK) != 0)
    fail("--slot-save-path %s: not a writable directory", o.slot_save_path.c_str());
  o.load_model = [pp](const std::string& path) { return multinode::load(path, pp); };
  o.cache_peers = multinode::cache_peers;
  o.make_experts = [stream](model::Model& m, uint64_t state_bytes) {
    return cli::make_expert_store(m, stream, false, state_bytes);
  };
  if (max_body_mb <= 0 || max_body_mb > 1024) fail("--max-body-mb must be in (0, 1024]");
  o.http.max_body = static_cast<size_t>(max_body_mb * 1024 * 1024);
  if (max_inflight_mb < 0) fail("--max-inflight-mb must be >= 0");
  o.http.max_inflight_bytes = max_inflight_mb > 0 ? static_cast<size_t>(max_inflight_mb * 1024 * 1024) : 8 * o.http.max_body;
  if (o.http.max_inflight_bytes < o.http.max_body) fail("--max-inflight-mb must be at least --max-body-mb");
  if (o.http.max_connections < 1) fail("--max-connections must be >= 1");
  if (o.http.max_connections_per_ip < 0) fail("--max-connections-per-ip must be >= 0");
  if (!multinode::leader()) {  // under mpirun: the leader serves, this process runs its passes
    auto m = multinode::load(o.model_path, pp);
    const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(m->hparams().n_ctx_train, 4096);
    auto store = cli::make_expert_store(*m, stream, false, o.parallel * model::state_bytes(m->hparams(), n_ctx));
    ThreadPool pool(cli::pick_threads(o.threads));
    model::RunOptions opt{&pool, cli::parse_f16_rule(o.f16_rule), nullptr};
    opt.experts = store.get();
    return multinode::follow(*m, opt);
  }
  // Every connection is a descriptor: use the hard limit, and keep the connection limit under it.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
    getrlimit(RLIMIT_NOFILE, &nofile);
    const rlim_t room = nofile.rlim_cur > 128 ? nofile.rlim_cur - 128 : 1;  // model file, refusals, stdio
    if (nofile.rlim_cur != RLIM_INFINITY && static_cast<rlim_t>(o.http.max_connections) > room) {
      std::fprintf(stderr, "k3 serve: --max-connections %d lowered to %llu (open-file limit %llu)\n",
                   o.http.max_connections, static_cast<unsigned long long>(room),
                   static_cast<unsigned long long>(nofile.rlim_cur));
      o.http.max_connections = static_cast<int>(room);
    }
  }
  const int queue = o.queue >= 0 ? o.queue : 8 * o.parallel;
  o.http.threads = http_threads > 0 ? http_threads : o.parallel + queue + 16;
  o.http.backlog = o.http.threads;

  // Signals are handled by one thread (sigwait); every other thread, created below, blocks them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);  // wakes the signal thread when run() ends on its own
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit fails the cache write (EFBIG), not the server

  server::Server s(o);
  const int port = s.bind();
  std::fprintf(stderr, "k3 serve: %s\n", s.describe().c_str());
  if (o.test_canned) std::fprintf(stderr, "k3 serve: WARNING: --test-canned is on (test mode)\n");
  if (!o.test_script.empty())
    std::fprintf(stderr, "k3 serve: WARNING: --test-script %s is on (test mode): scripted outputs come first\n",
                 o.test_script.c_str());
  std::fprintf(stderr, "k3 serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stderr);

  std::thread stopper;
  std::thread sig_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGUSR1) return;  // run() ended on its own
    std::fprintf(stderr, "k3 serve: %s, shutting down (finishing in-flight requests)\n", strsignal(sig));
    stopper = std::thread([&] { s.shutdown(); });
    for (;;) {
      sigwait(&sigs, &sig);
      if (sig == SIGUSR1) return;
      std::fprintf(stderr, "k3 serve: second signal, exiting now\n");
      std::_Exit(130);
    }
  });

  s.run();
  pthread_kill(sig_thread.native_handle(), SIGUSR1);
  sig_thread.join();
  if (stopper.joinable()) stopper.join();
  std::fprintf(stderr, "k3 serve: stopped\n");
  return 0;
}

K3_COMMAND("serve", "OpenAI-compatible HTTP server", cmd_serve);
