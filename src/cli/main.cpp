#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "multinode/multinode.h"

namespace k3::cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace k3::cli

static void usage() {
  auto cmds = k3::cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::printf("k3: the Kimi-K3 inference toolchain\n\nusage: k3 COMMAND [options]   (k3 COMMAND --help for details)\n\ncommands:\n");
  for (const auto& c : cmds) std::printf("  %-12s %s\n", c.name, c.summary);
}

// The commands that run under mpirun as one model across the processes (multinode/multinode.h).
static bool runs_distributed(const char* name) {
  for (const char* c : {"run", "logits", "bench", "perplexity", "serve", "chat"})
    if (!std::strcmp(c, name)) return true;
  return false;
}

int main(int argc, char** argv) {
  k3::multinode::init(argc, argv);
  // llama.cpp's multi-letter short flags, which the option parser cannot declare
  static char model_draft[] = "--model-draft";
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "-md")) argv[i] = model_draft;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    if (k3::multinode::leader()) usage();
    return k3::multinode::finish(argc < 2 ? 1 : 0, "", "");
  }
  for (const auto& c : k3::cli::registry()) {
    if (std::strcmp(c.name, argv[1]) != 0) continue;
    int status = 1;
    std::string error;
    try {
      if (k3::multinode::active() && !runs_distributed(c.name))
        k3::fail("k3 %s runs as one process: start it without mpirun (under mpirun: run, logits, bench, perplexity, "
                 "serve, chat)",
                 c.name);
      status = c.fn(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      error = e.what();
    }
    return k3::multinode::finish(status, c.name, error);
  }
  if (k3::multinode::leader()) std::fprintf(stderr, "k3: unknown command '%s' (see k3 --help)\n", argv[1]);
  return k3::multinode::finish(2, "", "");
}
