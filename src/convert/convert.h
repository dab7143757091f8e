// `k3 convert`: a Hugging Face Kimi-K3 checkpoint to a split GGUF set, one part per source shard
// (conversion.md §6), and the vision tower to mmproj-<name>-BF16.gguf (vision.md §3), written and
// checked like a part. Parts are independent: each is written under a temporary name (direct I/O
// where the filesystem allows), its digests taken from the bytes as they are written, re-opened
// and checked (size, metadata, tensor table; with verify_writes also every byte read back from
// the disk), and only then renamed; MANIFEST.json gains its tensors after the rename. A rerun checks finished parts against the manifest (every byte
// hashed) and redoes whatever is missing or wrong, so kill -9 at any point loses at most the
// parts in flight.
#pragma once
#include <cstdint>
#include <string>

#include "convert/plan.h"

namespace k3::convert {

struct ConvertOptions {
  PlanOptions plan;
  std::string out_dir;
  std::string scratch;   // where parts are assembled (default: out_dir)
  std::string shards;    // "2,5,9" / "40-60"; empty = all parts
  int jobs = 1;
  bool quiet = false;
  bool dry_run = false;  // plan and check only
  bool verify_writes = false;  // read every written part back before renaming it (twice the disk traffic)
  bool vocab_only = false;     // write only <name>-vocab.gguf: the metadata and tokenizer, no tensors
};

struct ConvertResult {
  int parts_total = 0, parts_written = 0, parts_skipped = 0;
  size_t tensors = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
};

// Throws k3::Error on bad input or I/O failure (after removing its temporary files).
ConvertResult run_convert(const ConvertOptions& opt);

inline constexpr const char* kManifestName = "MANIFEST.json";

}  // namespace k3::convert
