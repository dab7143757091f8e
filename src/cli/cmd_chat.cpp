// k3 chat: an interactive terminal chat with the same chat template, engine and K3 output parser
// as k3 serve. Reasoning is shown dimmed; tool calls are printed as calls. The prompt cache keeps
// each turn's states, so the next turn processes only its new tokens; --session FILE keeps the
// conversation and those states across runs.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "cache/identity.h"
#include "cache/prefix_cache.h"
#include "chat/chat_template.h"
#include "chat/k3_parser.h"
#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include "multinode/multinode.h"
#include "server/engine.h"
#include "server/snapshot_points.h"
#include "server/text_stream.h"
#include "vision/vision.h"

using namespace k3;
using json = nlohmann::ordered_json;

namespace {

std::atomic<bool> g_generating{false};
std::atomic<bool> g_interrupt{false};

void on_sigint(int) {
  if (g_generating.load()) {
    g_interrupt = true;
    return;
  }
  const char nl[] = "\n";
  (void)!write(STDOUT_FILENO, nl, 1);
  _exit(0);
}

struct Style {
  bool tty;
  const char* dim() const { return tty ? "\x1b[2m" : ""; }
  const char* bold() const { return tty ? "\x1b[1m" : ""; }
  const char* reset() const { return tty ? "\x1b[0m" : ""; }
};

void help() {
  std::printf(
      "commands: /exit  /reset (forget the conversation)  /think on|off  /effort low|high|max\n"
      "          /system TEXT (replace the system prompt)  /image PATH (attach to the next message; --mmproj)  /help\n"
      "A line ending in \\ continues on the next line. Ctrl-C stops a reply; at the prompt it exits.\n");
}

}  // namespace

static int cmd_chat(int argc, char** argv) {
  CLI::App app{"Chat with a Kimi-K3 model in the terminal (same template and output parser as k3 serve).",
               "k3 chat"};
  std::string model_path, system_prompt, template_file, tools_file, effort = "max", f16_rule, session,
      cache_ram = "auto";
  int64_t n_ctx = 0;
  int threads = 0, n_predict = 2048;
  bool no_think = false, show_prompt = false;
  model::SamplerParams sp{0.8f, 40, 0.95f, 0.05f, 0};
  int64_t seed = -1;
  app.add_option("-m,--model", model_path, "GGUF model (default: the built-in synthetic model)");
  app.add_option("-c,--ctx", n_ctx, "context size (default: min(training context, 4096))");
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  app.add_option("-n,--n-predict", n_predict, "largest reply in tokens")->capture_default_str();
  app.add_option("-s,--system", system_prompt, "system prompt");
  app.add_option("--chat-template-file", template_file, "Jinja chat template overriding the model's");
  app.add_option("--tools", tools_file, "JSON file with an OpenAI tools array to offer the model");
  app.add_flag("--no-think", no_think, "thinking off");
  app.add_option("--effort", effort, "thinking effort: low | high | max")->capture_default_str();
  app.add_option("--temp", sp.temp, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", sp.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", sp.top_p, "top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", sp.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed (default: random)");
  app.add_option("--f16-rule", f16_rule, "amx | round (default: from the CPU)");
  int pp = 1;
  cli::add_pp_flag(app, pp);
  app.add_flag("--show-prompt", show_prompt, "print each rendered prompt (debugging)");
  cli::StreamFlags stream;
  cli::add_stream_flags(app, stream);
  cli::SpecFlags specf;
  cli::add_spec_flags(app, specf);
  std::string mmproj;
  vision::VisionOptions vo;
  app.add_option("--mmproj", mmproj, "vision mmproj GGUF: /image PATH attaches an image");
  app.add_option("--image-max-pixels", vo.max_pixels, "refuse images with more pixels")->capture_default_str();
  app.add_option("--image-max-tokens", vo.max_tokens, "largest number of rows per image (0: the mmproj's patch limit)");
  app.add_option("--session", session,
                 "keep the conversation and its cached states in FILE (saved after each turn, resumed at start)");
  app.add_option("--cache-ram", cache_ram, "prompt cache budget (K/M/G; 0: every turn from its first token)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const Style st{isatty(STDOUT_FILENO) != 0};
  const bool interactive = isatty(STDIN_FILENO) != 0;
  sp.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();

  if (model_path.empty()) model_path = cli::builtin_model_path();
  auto m = multinode::load(model_path, pp);
  const int64_t ctx = n_ctx > 0 ? n_ctx : std::min<int64_t>(m->hparams().n_ctx_train, 4096);
  auto store = cli::make_expert_store(*m, stream, false, model::state_bytes(m->hparams(), ctx));
  if (!multinode::leader()) {
    ThreadPool pool(cli::pick_threads(threads));
    model::RunOptions opt{&pool, cli::parse_f16_rule(f16_rule), nullptr};
    opt.experts = store.get();
    return multinode::follow(*m, opt);
  }
  auto tok = tok::Tokenizer::from_metadata(m->meta());
  std::unique_ptr<jinja::Template> own;
  if (!template_file.empty()) own = std::make_unique<jinja::Template>(cli::read_text_file(template_file), template_file);
  else if (auto t = m->meta().get_str_opt("tokenizer.chat_template"); t && !t->empty())
    own = std::make_unique<jinja::Template>(*t, "tokenizer.chat_template");
  const jinja::Template& tmpl = own ? *own : chat::builtin_kimi_k3_template();
  const std::string template_text = !template_file.empty() ? cli::read_text_file(template_file)
                                    : own                   ? *m->meta().get_str_opt("tokenizer.chat_template")
                                                            : std::string(chat::kKimiK3Template);
  json tools = json::array();
  if (!tools_file.empty()) {
    tools = json::parse(cli::read_text_file(tools_file), nullptr, false);
    if (!tools.is_array()) fail("%s: expected a JSON array of tools", tools_file.c_str());
  }

  server::EngineOptions eo;
  eo.parallel = 1;
  eo.n_ctx = ctx;
  eo.threads = cli::pick_threads(threads);
  eo.queue = 1;
  eo.f16_rule = cli::parse_f16_rule(f16_rule);
  eo.experts = store.get();
  cli::SpecSetup spec_setup = cli::load_spec(*m, specf);
  eo.spec = spec_setup.options;
  eo.draft = spec_setup.draft.get();
  std::unique_ptr<cache::PrefixCache> pc;
  {
    cache::Options co;
    co.side_width = eo.draft ? eo.draft->side_width() : 0;
    co.ram_bytes = cache_ram == "auto" ? cache::auto_ram_budget(store ? 0 : cache::mapped_bytes(*m),
                                                                model::state_bytes(m->hparams(), eo.n_ctx))
                                       : cache::parse_size(cache_ram, "--cache-ram");
    co.snapshot_every = cache::Layout::of(m->hparams()).default_snapshot_every();
    co.peers = multinode::cache_peers();
    std::string compute = cache::compute_of(eo.f16_rule);
    if (eo.draft) compute += ", draft " + eo.draft->identity();
    if (co.ram_bytes > 0) pc = std::make_unique<cache::PrefixCache>(*m, template_text, compute, co);
    else if (!session.empty()) fail("--session keeps cached states: it needs --cache-ram above 0");
  }
  eo.cache = pc.get();
  server::Engine engine(*m, *tok, eo);
  std::unique_ptr<vision::Vision> vis;
  if (!mmproj.empty()) {
    vo.threads = eo.threads;
    vis = std::make_unique<vision::Vision>(mmproj, vo);
    vis->check_text_width(m->hparams().n_embd, model_path);
  }
  // Every image of the conversation in order (the template consumes them in message order), and
  // those attached to the next message.
  std::vector<std::shared_ptr<const vision::ImageRows>> images, pending;

  std::signal(SIGINT, on_sigint);
  std::printf("%sk3 chat%s: %s, context %lld, thinking %s. /help for commands.\n", st.bold(), st.reset(),
              model_path.c_str(), static_cast<long long>(eo.n_ctx), no_think ? "off" : effort.c_str());

  json history = json::array();
  if (!session.empty() && ::access(session.c_str(), F_OK) == 0) {
    cache::PrefixCache::Loaded l;
    try {
      engine.exclusive([&] { l = pc->load(session); });  // under mpirun every process reads its share
    } catch (const cache::FileError& e) {
      fail("--session: %s (remove the file or name another)", e.what());
    }
    if (!l.extra.is_object() || !l.extra.contains("history") || !l.extra["history"].is_array())
      fail("--session %s: not a k3 chat session (no history)", session.c_str());
    history = l.extra["history"];
    if (l.extra.contains("system") && l.extra["system"].is_string()) system_prompt = l.extra["system"];
    std::printf("(resumed %zu messages from %s, %zu tokens cached)\n", history.size(), session.c_str(), l.ids.size());
  }
  for (;;) {
    if (interactive) std::printf("%s> %s", st.bold(), st.reset()), std::fflush(stdout);
    std::string line, part;
    bool got = false;
    while (std::getline(std::cin, part)) {
      got = true;
      if (!part.empty() && part.back() == '\\') {
        line += part.substr(0, part.size() - 1) + "\n";
        continue;
      }
      line += part;
      break;
    }
    if (!got) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/help") {
      help();
      continue;
    }
    if (line == "/reset") {
      history = json::array();
      images.clear(), pending.clear();
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line == "/think on" || line == "/think off") {
      no_think = line == "/think off";
      std::printf("(thinking %s)\n", no_think ? "off" : "on");
      continue;
    }
    if (line.rfind("/effort ", 0) == 0) {
      effort = line.substr(8);
      std::printf("(effort %s)\n", effort.c_str());
      continue;
    }
    if (line.rfind("/system ", 0) == 0) {
      system_prompt = line.substr(8);
      std::printf("(system prompt set)\n");
      continue;
    }
    if (line.rfind("/image", 0) == 0 && (line.size() == 6 || line[6] == ' ')) {
      const std::string path = line.size() > 7 ? line.substr(7) : "";
      if (!vis) {
        std::printf("/image needs a vision tower: start k3 chat with --mmproj\n");
      } else if (path.empty()) {
        std::printf("usage: /image PATH\n");
      } else {
        try {
          pending.push_back(vis->encode(vision::read_image_file(path), "", path));
          const vision::Geometry& g = pending.back()->geometry;
          std::printf("(image %s: %ux%u, %lld rows; attached to your next message)\n", path.c_str(), g.width, g.height,
                      static_cast<long long>(pending.back()->n_tokens));
        } catch (const Error& e) {
          std::printf("%s\n", e.what());
        }
      }
      continue;
    }
    if (line[0] == '/') {
      std::printf("unknown command %s (/help)\n", line.c_str());
      continue;
    }

    json user = {{"role", "user"}, {"content", line}};
    if (!pending.empty()) {
      json parts = json::array();
      for (size_t i = 0; i < pending.size(); ++i) parts.push_back({{"type", "image_url"}, {"image_url", {{"url", "k3-chat-image"}}}});
      parts.push_back({{"type", "text"}, {"text", line}});
      user["content"] = parts;
    }
    std::vector<std::shared_ptr<const vision::ImageRows>> turn_images = images;
    turn_images.insert(turn_images.end(), pending.begin(), pending.end());
    json msgs = json::array();
    if (!system_prompt.empty()) msgs.push_back({{"role", "system"}, {"content", system_prompt}});
    for (const auto& h : history) msgs.push_back(h);
    msgs.push_back(user);
    json in = {{"messages", chat::normalize_openai_messages(msgs)}, {"add_generation_prompt", true}};
    if (!turn_images.empty()) {
      json prompts = json::array();
      for (const auto& im : turn_images) prompts.push_back(im->prompt());
      in["image_prompts"] = prompts;
    }
    if (!tools.empty()) in["tools"] = tools;
    if (no_think) in["thinking"] = false;
    else in["thinking_effort"] = effort;
    std::string prompt;
    try {
      prompt = chat::render_chat(tmpl, in);
    } catch (const std::exception& e) {
      std::printf("template error: %s\n", e.what());
      continue;
    }
    if (show_prompt) std::printf("%s%s%s\n", st.dim(), prompt.c_str(), st.reset());
    vision::ImagePrompt ip;
    try {
      ip = vision::expand_media_pads(tok->encode(prompt, true), tok->token_id("<|media_pad|>"), turn_images);
    } catch (const Error& e) {
      std::printf("%s\n", e.what());
      continue;
    }
    std::vector<int32_t>& ids = ip.ids;
    if (static_cast<int64_t>(ids.size()) >= eo.n_ctx) {
      std::printf("the conversation (%zu tokens) no longer fits the context of %lld tokens; /reset to start over\n",
                  ids.size(), static_cast<long long>(eo.n_ctx));
      continue;
    }

    chat::K3ParserOptions po;
    po.thinking = !no_think;
    po.tools = tools;
    chat::K3StreamParser parser(po);
    server::Detokenizer detok(*tok, true);
    server::GenRequest gr;
    if (pc) gr.snapshot_at = server::message_snapshot_points(tmpl, in, prompt, ids, *tok);
    gr.prompt = std::move(ids);
    gr.images = std::move(ip.images);
    gr.sampling = sp;
    ++sp.seed;  // a different draw each turn, reproducible from --seed
    gr.max_tokens = n_predict;
    auto task = std::make_shared<server::Task>(std::move(gr));
    g_interrupt = false;
    g_generating = true;
    if (engine.submit(task) != server::Engine::Admit::Ok) fail("the engine refused the request");

    bool in_reasoning = false;
    size_t calls_shown = 0;
    auto show = [&](const chat::ChatDelta& d) {
      if (!d.reasoning_content.empty()) {
        if (!in_reasoning) std::printf("%s", st.dim());
        in_reasoning = true;
        std::fwrite(d.reasoning_content.data(), 1, d.reasoning_content.size(), stdout);
      }
      if (!d.content.empty()) {
        if (in_reasoning) std::printf("%s\n", st.reset());
        in_reasoning = false;
        std::fwrite(d.content.data(), 1, d.content.size(), stdout);
      }
      std::fflush(stdout);
    };
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> got_ids, all_ids;
    int n_gen = 0;
    for (;;) {
      got_ids.clear();
      const bool done = task->take(got_ids, std::chrono::milliseconds(50));
      std::string text;
      for (int32_t id : got_ids) text += detok.push(id);
      all_ids.insert(all_ids.end(), got_ids.begin(), got_ids.end());
      n_gen += static_cast<int>(got_ids.size());
      if (done) text += detok.flush();
      show(parser.feed(text));
      if (done) break;
      if (g_interrupt) task->cancel();
    }
    g_generating = false;
    show(parser.finish());
    if (in_reasoning) std::printf("%s", st.reset());
    const chat::ChatMessage& msg = parser.message();
    for (; calls_shown < msg.tool_calls.size(); ++calls_shown)
      std::printf("\n%s[tool call] %s(%s)%s", st.bold(), msg.tool_calls[calls_shown].name.c_str(),
                  msg.tool_calls[calls_shown].arguments.c_str(), st.reset());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const server::TaskTimes tt = task->times();
    std::printf("\n%s[%d tokens, %.1f tok/s; prompt %d tokens, %d cached%s%s]%s\n", st.dim(), n_gen,
                s > 0 ? n_gen / s : 0.0, tt.n_prompt, tt.n_cached,
                task->finish() == server::Finish::Length ? ", length limit" : "", g_interrupt ? ", interrupted" : "",
                st.reset());
    if (task->finish() == server::Finish::Error) std::printf("error: %s\n", task->error().c_str());

    history.push_back(user);
    images = std::move(turn_images);
    pending.clear();
    json a = {{"role", "assistant"}, {"content", msg.content}};
    if (!msg.reasoning_content.empty()) a["reasoning_content"] = msg.reasoning_content;
    if (!msg.tool_calls.empty()) {
      json calls = json::array();
      for (size_t i = 0; i < msg.tool_calls.size(); ++i)
        calls.push_back({{"id", "call_" + std::to_string(history.size()) + "_" + std::to_string(i)},
                         {"type", "function"},
                         {"function", {{"name", msg.tool_calls[i].name}, {"arguments", msg.tool_calls[i].arguments}}}});
      a["tool_calls"] = calls;
    }
    history.push_back(a);
    if (!session.empty() && task->finish() != server::Finish::Error) {
      std::vector<int32_t> fed = task->request().prompt;
      fed.insert(fed.end(), all_ids.begin(), all_ids.end());
      try {
        engine.exclusive([&] { pc->save(session, cache::Key{fed, {}}, json{{"history", history}, {"system", system_prompt}}); });
      } catch (const std::exception& e) {
        std::printf("(session not saved: %s)\n", e.what());
      }
    }
  }
  return 0;
}

K3_COMMAND("chat", "interactive terminal chat (same template and parser as serve)", cmd_chat);
