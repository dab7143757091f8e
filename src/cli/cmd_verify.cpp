// k3 verify: checks GGUF files against a converter manifest (src/convert/manifest.h).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "common/error.h"
#include "convert/manifest.h"
#include "convert/progress.h"

static int cmd_verify(int argc, char** argv) {
  using namespace k3::convert;
  CLI::App app{"Hashes every tensor of the given GGUF files and compares name, type, shape and SHA-256 with a "
               "MANIFEST.json written by k3 convert. Each mismatch is reported by name; exit status 1 if any.",
               "k3 verify"};
  std::string manifest;
  std::vector<std::string> files;
  int jobs = 2;
  bool quiet = false;
  app.add_option("--manifest,-m", manifest, "MANIFEST.json")->required()->check(CLI::ExistingFile);
  app.add_option("files", files, "GGUF files (a whole split set, or some of its parts)")->required()->check(CLI::ExistingFile);
  app.add_option("--jobs,-j", jobs, "files hashed in parallel")->check(CLI::Range(1, 256));
  app.add_flag("--quiet,-q", quiet, "print only problems");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const Manifest m = Manifest::load(manifest);
  VerifyReport r = verify_files(m, files, jobs);
  for (const auto& p : r.problems) std::printf("MISMATCH %s\n", p.c_str());
  if (!quiet || !r.ok())
    std::printf("k3 verify: %zu files, %zu tensors checked, %zu ok, %zu problems (%s hashed)\n", r.files,
                r.tensors_checked, r.tensors_ok, r.problems.size(), Progress::human_bytes(static_cast<double>(r.bytes)).c_str());
  return r.ok() ? 0 : 1;
}
K3_COMMAND("verify", "check GGUF files against a k3 convert manifest", cmd_verify);
