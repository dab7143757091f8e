// Writes the valid and hostile test files into a directory (fuzzing seeds): hostile cases go to
// <dir>/<case id>/, valid files to <dir>/valid/.
#include <cstdio>
#include <filesystem>

#include "corpus.h"
#include "util.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_make_corpus DIR\n");
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path root = argv[1];
  fs::create_directories(root / "valid");
  for (const auto& f : gguf_test::valid_files()) gguf_test::save((root / "valid" / f.name).string(), f.bytes);
  for (const auto& c : gguf_test::hostile_cases()) {
    fs::create_directories(root / c.id);
    for (const auto& f : c.files) gguf_test::save((root / c.id / f.name).string(), f.bytes);
  }
  return 0;
}
