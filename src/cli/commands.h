// Subcommands of the k3 executable register themselves here: one file per command,
// K3_COMMAND(name, summary, fn) with fn(argc, argv) where argv[0] is the command name.
#pragma once
#include <string>
#include <vector>

namespace k3::cli {

using CommandFn = int (*)(int argc, char** argv);
struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
};
std::vector<Command>& registry();
// k3 split --tp (split_shares.cpp); null in a build without it.
using SplitSharesFn = int (*)(const std::string& in, const std::string& prefix, int tp, int pp, bool json, bool quiet);
extern SplitSharesFn split_shares;
struct Registrar {
  Registrar(const char* name, const char* summary, CommandFn fn) { registry().push_back({name, summary, fn}); }
};

}  // namespace k3::cli

#define K3_COMMAND(name, summary, fn) static ::k3::cli::Registrar k3_registrar_##fn(name, summary, fn)
