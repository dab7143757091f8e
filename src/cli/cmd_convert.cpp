// k3 convert: Hugging Face Kimi-K3 checkpoint -> split GGUF set (src/convert/convert.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"
#include "convert/convert.h"
#include "convert/dspark.h"

static int cmd_convert(int argc, char** argv) {
  using namespace k3::convert;
  CLI::App app{
      "Converts a Hugging Face Kimi-K3 checkpoint (safetensors shards, BF16 + compressed-tensors MXFP4) to a split "
      "GGUF set, one part per source shard, losslessly, and its vision tower to mmproj-<name>-BF16.gguf. Parts are written under a temporary name, verified, then "
      "renamed; MANIFEST.json records each tensor's SHA-256. Rerunning skips verified parts and redoes the rest. "
      "A DSpark draft checkpoint (config.json model_type k3_dspark) becomes one <name>.gguf (docs/spec.md).",
      "k3 convert"};
  ConvertOptions o;
  std::string outtype = "auto";
  app.add_option("--src", o.plan.src, "checkpoint directory (model.safetensors.index.json + shards)")->required();
  app.add_option("--meta", o.plan.meta, "directory of config.json, tiktoken.model, tokenizer_config.json (default: --src)");
  app.add_option("--out-dir", o.out_dir, "output directory for the GGUF parts and MANIFEST.json")->required();
  app.add_option("--name", o.plan.name, "output file prefix (default: the source directory's name)");
  app.add_option("--shards", o.shards,
                 "convert only these parts, e.g. 2,5,9 or 40-60 (1-based), 'mmproj' for the vision file (default all)");
  app.add_flag("--no-mmproj", o.plan.no_mmproj, "skip the vision tower and projector (no mmproj file)");
  app.add_flag("--vocab-only", o.vocab_only,
               "write only <name>-vocab.gguf: every kimi-k3.* key and the tokenizer, no tensors");
  app.add_option("--jobs,-j", o.jobs, "parts converted in parallel")->check(CLI::Range(1, 256));
  app.add_option("--outtype", outtype, "type of matrix weights: auto (keep the source's float type), bf16, f16, f32")
      ->check(CLI::IsMember({"auto", "bf16", "f16", "f32"}));
  app.add_flag("--verify-writes", o.verify_writes,
               "read each written part back from the disk and compare its bytes before renaming it");
  app.add_option("--scratch", o.scratch, "directory where parts are assembled before moving to --out-dir");
  app.add_option("--chat-template", o.plan.chat_template_file, "Jinja chat template to embed (overrides the checkpoint's)");
  app.add_flag("--quiet,-q", o.quiet, "no progress output, no summary");
  app.add_flag("--dry-run", o.dry_run, "read and check the checkpoint, print the plan, write nothing");
  DraftConvertOptions d;
  app.add_flag("--no-embd", d.no_embd,
               "DSpark draft: leave token_embd out (the target's is used; the released one is a copy of it)");
  app.add_option("--block-size", d.block_size, "DSpark draft: the largest block k3 accepts (block_size key)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (is_dspark_checkpoint(o.plan.src)) {  // a draft (dspark.md §3): one GGUF, bytes kept
    if (outtype != "auto") k3::fail("--outtype: a DSpark draft keeps its weights' type (k3 quantize makes others)");
    d.src = o.plan.src;
    d.name = o.plan.name.empty() ? std::filesystem::path(o.plan.src).lexically_normal().filename().string() : o.plan.name;
    std::filesystem::create_directories(o.out_dir);
    d.out = (std::filesystem::path(o.out_dir) / (d.name + ".gguf")).string();
    convert_dspark(d);
    if (!o.quiet) std::printf("k3 convert: DSpark draft written to %s\n", d.out.c_str());
    return 0;
  }
  o.plan.outtype = outtype == "bf16" ? OutType::BF16 : outtype == "f16" ? OutType::F16 : outtype == "f32" ? OutType::F32 : OutType::Auto;
  run_convert(o);
  return 0;
}
K3_COMMAND("convert", "convert a Hugging Face Kimi-K3 checkpoint to GGUF", cmd_convert);
