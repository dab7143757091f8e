// The conversion plan: every output tensor of the GGUF set with its sources in the checkpoint,
// its transform, type and shape, grouped into parts that follow the source sharding. Built from
// config.json, the index and the shard headers only (no tensor data is read), and fully
// validated: every error about the input is raised here, before anything is written.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "model/registry.h"
#include "vision/hparams.h"

namespace k3::convert {

enum class OutType { Auto, BF16, F16, F32 };

struct PlanOptions {
  std::string src;            // checkpoint directory (index + shards)
  std::string meta;           // config.json, tiktoken.model, tokenizer_config.json (default: src)
  std::string name;           // output file prefix (default: the source directory's name)
  OutType outtype = OutType::Auto;
  std::string chat_template_file;  // overrides the checkpoint's template
  bool no_mmproj = false;          // skip the vision tower and projector
};

struct SrcRef {
  int shard = -1;
  const st::TensorView* t = nullptr;
};

struct OutTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;     // ggml order
  model::Transform xf = model::Transform::None;
  std::vector<SrcRef> src;     // None/ToF32/Conv/ALog/Split*: 1; FuseScore: norm, proj;
                               // StackExperts: E (float) or 2E (packed, scale interleaved)
  bool mxfp4 = false;          // StackExperts from compressed-tensors MXFP4
  bool permute_qk = false;     // mmproj attn_qkv: rows reordered (vision.md §3), bytes kept
  int64_t rows = 0, cols = 0;  // StackExperts: one expert's logical [rows, cols]
  int64_t heads = 0, d_nope = 0, d_v = 0, r_kv = 0;  // SplitKb/SplitVb
  int part = 0;                // index into Plan::parts
  uint64_t nbytes = 0;         // output bytes
  uint64_t src_bytes = 0;      // input bytes read
};

struct Part {
  int no = 0;                  // 0-based
  bool mmproj = false;         // the vision tower's file (not part of the split set)
  std::string file;            // file name (no directory)
  int src_shard = -1;
  std::vector<int> tensors;    // indices into Plan::tensors, in file order
  gguf::Metadata meta;
  uint64_t data_bytes = 0, src_bytes = 0;
  uint64_t file_bytes = 0;     // exact size of the finished file
};

struct Plan {
  st::Index index;
  std::vector<std::unique_ptr<st::File>> shards;  // parallel to index.shards
  HfConfig cfg;
  gguf::Metadata meta;         // all KVs (part 1 carries them)
  std::vector<OutTensor> tensors;
  std::vector<Part> parts;     // the split set, then the mmproj if there is one
  int n_text_parts = 0;
  vision::VisionHParams vision;  // when there is an mmproj part
  size_t skipped_vision = 0;   // vision tensors not converted (--no-mmproj)
  std::vector<std::string> notes;  // informational lines (template source, vocab, ...)
};

Plan make_plan(const PlanOptions& opt);

// The exact byte size of a GGUF file with this metadata and these tensors (alignment 32).
uint64_t gguf_file_size(const gguf::Metadata& meta, const std::vector<const OutTensor*>& tensors);

// "2,5,9" / "40-60" / "1-3,7" -> sorted 1-based numbers within 1..n; throws on a bad spec.
std::vector<int> parse_shard_spec(const std::string& spec, int n);

const char* outtype_name(OutType t);

}  // namespace k3::convert
