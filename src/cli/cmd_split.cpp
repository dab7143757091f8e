// k3 split / k3 merge: turn a GGUF file into a split set (gguf-contract.md §7) and back; or into
// one file per process of an mpirun job (--tp N, multinode/share_files.h).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace k3::cli {
SplitSharesFn split_shares = nullptr;
}

namespace {

using namespace k3;

const char* kSplitUsage =
    "usage: k3 split IN OUT_PREFIX (--split-max-size N[K|M|G] | --split-max-tensors N)\n"
    "       k3 split IN OUT_PREFIX --tp N [--pp K] [--json] [-q]\n"
    "\n"
    "Writes IN (a GGUF file or the first part of a split set) as OUT_PREFIX-00001-of-000NN.gguf ...\n"
    "Part 1 carries all metadata; every part carries split.no, split.count and split.tensors.count.\n"
    "A tensor is never divided, so a part may exceed the size limit when one tensor does.\n"
    "\n"
    "  --split-max-size N[K|M|G]   at most N bytes of tensor data per part (K/M/G: powers of 1024)\n"
    "  --split-max-tensors N       at most N tensors per part\n"
    "\n"
    "With --tp N: one file per process of an mpirun job of N x K processes (K pipeline stages, each N in\n"
    "tensor parallel; docs/multinode.md), OUT_PREFIX-rankR-of-P.gguf, holding exactly what process R\n"
    "reads: its share of every tensor cut among the processes, the whole tensors it needs, the metadata.\n"
    "Each file is written under a temporary name, read back and checked, then renamed. Run them with\n"
    "  mpirun -np P k3 serve -m OUT_PREFIX [--pp K] ...   (or -m any one of the files)\n"
    "\n"
    "  --tp N    processes in tensor parallel in each stage\n"
    "  --pp K    pipeline stages (default 1)\n"
    "  --json    print what each file holds as JSON\n"
    "  -q        no progress\n";

const char* kMergeUsage =
    "usage: k3 merge FIRST_PART OUT\n"
    "\n"
    "Writes the split set whose first part is FIRST_PART as the single GGUF file OUT, with the\n"
    "metadata of part 1 minus the split.* keys.\n";

bool is_help(const char* a) { return !std::strcmp(a, "--help") || !std::strcmp(a, "-h"); }

uint64_t parse_count(const std::string& flag, const std::string& s, bool allow_suffix) {
  uint64_t mult = 1;
  std::string digits = s;
  if (allow_suffix && !s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        mult = uint64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        mult = uint64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        mult = uint64_t{1} << 30;
        break;
      default:
        mult = 1;
    }
    if (mult != 1) digits.pop_back();
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 12)
    fail("%s: invalid value '%s'", flag.c_str(), s.c_str());
  uint64_t n = std::stoull(digits) * mult;
  if (n == 0) fail("%s: must be greater than 0", flag.c_str());
  return n;
}

int cmd_split(int argc, char** argv) {
  std::vector<std::string> pos;
  uint64_t max_bytes = 0, max_tensors = 0, tp = 0, pp = 0;
  bool json = false, quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (is_help(argv[i])) {
      std::printf("%s", kSplitUsage);
      return 0;
    }
    if (a == "--split-max-size" || a == "--split-max-tensors") {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      (a == "--split-max-size" ? max_bytes : max_tensors) = parse_count(a, argv[++i], a == "--split-max-size");
    } else if (a == "--tp" || a == "--pp") {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      (a == "--tp" ? tp : pp) = parse_count(a, argv[++i], false);
    } else if (a == "--json" || a == "-q") {
      (a == "--json" ? json : quiet) = true;
    } else if (a.starts_with("-")) {
      fail("unknown option '%s' (see k3 split --help)", a.c_str());
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2) fail("expected IN and OUT_PREFIX (see k3 split --help)");
  if (tp || pp) {
    if (max_bytes || max_tensors) fail("--tp writes one file per process: no --split-max-size or --split-max-tensors with it");
    if (!tp) fail("--pp needs --tp (the processes in tensor parallel in each stage)");
    if (tp > 4096 || pp > 4096) fail("--tp and --pp: at most 4096");
    if (!cli::split_shares) fail("--tp: this build of k3 split writes split sets only");
    return cli::split_shares(pos[0], pos[1], static_cast<int>(tp), pp ? static_cast<int>(pp) : 1, json, quiet);
  }
  if (json || quiet) fail("--json and -q go with --tp");
  if ((max_bytes != 0) == (max_tensors != 0)) fail("give exactly one of --split-max-size and --split-max-tensors");
  gguf::Model m = gguf::Model::open(pos[0]);
  for (const std::string& p : gguf::write_split(m, pos[1], max_bytes, max_tensors)) std::printf("%s\n", p.c_str());
  return 0;
}

int cmd_merge(int argc, char** argv) {
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    if (is_help(argv[i])) {
      std::printf("%s", kMergeUsage);
      return 0;
    }
    if (argv[i][0] == '-') fail("unknown option '%s' (see k3 merge --help)", argv[i]);
    pos.push_back(argv[i]);
  }
  if (pos.size() != 2) fail("expected FIRST_PART and OUT (see k3 merge --help)");
  gguf::Model m = gguf::Model::open(pos[0]);
  gguf::write_merged(m, pos[1]);
  std::printf("%s\n", pos[1].c_str());
  return 0;
}

}  // namespace

K3_COMMAND("split", "write a GGUF file as a split set", cmd_split);
K3_COMMAND("merge", "write a split set as one GGUF file", cmd_merge);
