// Shared fixtures of the converter tests: synthetic checkpoints written
// from make-tiny's generator, and comparisons of GGUF sets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "convert/convert.h"
#include "convert/hf_writer.h"
#include "model/synthetic.h"
#include "support/temp_dir.h"

namespace k3::test {


// make-tiny's tiny preset, optionally resized; types as given.
model::SynthOptions tiny_options(GgmlType type = GgmlType::BF16, GgmlType expert_type = GgmlType::MXFP4);

// Writes the GGUF `dir/ref.gguf` with make-tiny's generator and the HF checkpoint `dir/hf` from it.
struct Checkpoint {
  std::string gguf, hf;
};
Checkpoint make_checkpoint(const std::string& dir, const model::SynthOptions& o, const convert::HfLayout& lay = {});

convert::ConvertOptions convert_options(const std::string& src, const std::string& out, int jobs = 1);

// Every tensor of `expected` is in the set opened from `first_part` with the same type, shape and
// bytes, and the set has no other tensors. Returns "" or the first difference.
std::string compare_tensors(const std::string& expected, const std::string& first_part);

// Files under `dir` (names only, sorted), and their full contents for byte comparisons.
std::vector<std::string> list_dir(const std::string& dir);
std::string read_file(const std::string& path);
std::string first_part(const std::string& out_dir);  // the *-00001-of-*.gguf file

}  // namespace k3::test
