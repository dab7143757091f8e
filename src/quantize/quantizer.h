// Streaming quantization of a (split) GGUF model: every tensor is read from the mapping, converted
// to float a band of rows at a time (one expert of a 3-D stack at most), quantized on all threads
// and streamed to a gguf::Writer, which writes a temporary file and renames it when complete.
// Memory stays bounded by one band per tensor, whatever the model size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quantize/imatrix.h"
#include "quantize/recipe.h"
#include "quantize/report.h"

namespace k3::quant {

enum class SplitMode : uint8_t { None, Keep, MaxSize };

struct Options {
  int threads = 1;
  const Imatrix* imatrix = nullptr;        // importance for the scale searches (§6.7)
  const Imatrix* stats_weights = nullptr;  // weights of the weighted error (default: imatrix)
  SplitMode split = SplitMode::None;
  uint64_t split_max_bytes = 0;  // SplitMode::MaxSize
  std::string recipe_name;       // for the report and metadata
  // Called before each tensor: (index, count, plan). Null: silent.
  std::function<void(size_t, size_t, const TensorPlan&)> progress;
  // Called after each tensor with its statistics.
  std::function<void(const TensorReport&)> done;
};

// Output file names: `out` itself for one part, else "<out minus .gguf>-0000i-of-0000N.gguf".
std::vector<std::string> output_paths(const gguf::Model& in, const Plan& plan, const std::string& out,
                                      const Options& opt);

// Writes the quantized model. Nothing appears under an output name unless every part is complete
// (parts are written as "<name>.part" and renamed at the end; on an error they are removed).
Report quantize_model(const gguf::Model& in, const Plan& plan, const std::string& out, const Options& opt);

}  // namespace k3::quant
