#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/commands.h"
#include "common/error.h"

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

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  for (const auto& c : k3::cli::registry()) {
    if (std::strcmp(c.name, argv[1]) != 0) continue;
    try {
      return c.fn(argc - 1, argv + 1);
    } catch (const k3::Error& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "k3: unknown command '%s' (see k3 --help)\n", argv[1]);
  return 2;
}
