#include <cstdio>
#include <cstring>

#include "cli/commands.h"

static int cmd_version(int argc, char** argv) {
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf("usage: k3 version\n\nPrints the k3 version.\n");
    return 0;
  }
  std::printf("k3 0.1.0\n");
  return 0;
}
K3_COMMAND("version", "print the version", cmd_version);
