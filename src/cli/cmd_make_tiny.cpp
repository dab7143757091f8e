// k3 make-tiny: writes a random-initialised Kimi-K3 GGUF that keeps the real structure.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/commands.h"
#include "common/error.h"
#include "convert/hf_writer.h"
#include "convert/progress.h"
#include "model/hparams.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "vision/synthetic.h"

using namespace k3;

static GgmlType parse_type(const std::string& s, const char* flag) {
  const TypeInfo* t = type_by_name(s);
  if (!t) fail("%s: unknown type '%s'", flag, s.c_str());
  return t->type;
}

static int cmd_make_tiny(int argc, char** argv) {
  // The preset sets the defaults the other flags then change, so it is read first.
  std::string preset = "tiny";
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
  model::SynthOptions o = model::synth_preset(preset);
  o.name = "k3-synthetic-" + preset;

  CLI::App app{"Write a random-initialised Kimi-K3 model with the real structure (MLA on every 4th layer "
               "1-based plus the last, dense leading layers, AttnRes, latent MoE with shared experts, q-LoRA "
               "MLA with output gate, KDA gate lower bound) and a small byte-level BPE vocabulary.",
               "k3 make-tiny"};
  std::string out, type, expert_type;
  std::vector<std::string> overrides;
  app.add_option("--out,-o", out, "output GGUF path")->required();
  std::string hf_dir;
  app.add_option("--hf-dir", hf_dir, "also write the same weights as a Hugging Face checkpoint (real K3 layout) to DIR");
  app.add_option("--preset", preset,
                 "tiny | small | medium | k3-slice (medium: a few GB, for benchmarks; k3-slice: Kimi-K3's real widths "
                 "and vocabulary with --layers N, ~12 GB per MoE layer)");
  app.add_option("--seed", o.seed, "RNG seed")->capture_default_str();
  app.add_option("--type", type, "type of 2-D matrices: f32 f16 bf16 q8_0 q4_0 ... (default: preset's)");
  app.add_option("--expert-type", expert_type, "type of expert stacks: f32 f16 bf16 q8_0 mxfp4 ...");
  app.add_option("--tensor-type", overrides, "NAME_PART=TYPE: tensors whose name contains NAME_PART get TYPE");
  app.add_option("--layers", o.n_layer, "block_count")->capture_default_str();
  app.add_option("--hidden", o.n_embd, "embedding_length H")->capture_default_str();
  app.add_option("--heads", o.n_head, "attention heads (KDA and MLA)")->capture_default_str();
  app.add_option("--head-dim", o.head_dim, "KDA head size d")->capture_default_str();
  app.add_option("--conv", o.d_conv, "KDA short-conv kernel")->capture_default_str();
  app.add_option("--q-lora", o.q_lora, "MLA q LoRA rank")->capture_default_str();
  app.add_option("--kv-lora", o.kv_lora, "MLA kv LoRA rank (latent)")->capture_default_str();
  app.add_option("--qk-nope", o.qk_nope, "MLA non-positional q/k head size")->capture_default_str();
  app.add_option("--qk-rope", o.qk_rope, "MLA un-rotated 'rope' part")->capture_default_str();
  app.add_option("--v-head-dim", o.v_head, "MLA value head size")->capture_default_str();
  app.add_option("--experts", o.n_expert, "routed experts")->capture_default_str();
  app.add_option("--experts-used", o.n_expert_used, "experts per token")->capture_default_str();
  app.add_option("--expert-ff", o.n_ff_exp, "routed expert FFN width")->capture_default_str();
  app.add_option("--latent", o.latent, "latent width of routed experts")->capture_default_str();
  app.add_option("--shared-experts", o.n_shared, "shared experts (fused width multiplier)")->capture_default_str();
  app.add_option("--dense-ff", o.n_ff, "dense FFN width")->capture_default_str();
  app.add_option("--dense-layers", o.n_dense, "leading dense layers")->capture_default_str();
  app.add_option("--attn-res-block", o.attn_res_block, "AttnRes block size (0: off)")->capture_default_str();
  app.add_option("--mla-every", o.mla_every, "MLA on every Nth layer (1-based), plus the last")->capture_default_str();
  app.add_option("--vocab", o.n_vocab, "vocabulary size, up to 163840 (ranked + reserved + 256 special ids)")
      ->capture_default_str();
  app.add_option("--ctx", o.n_ctx, "context_length")->capture_default_str();
  app.add_option("--rms-eps", o.rms_eps, "RMS-norm epsilon")->capture_default_str();
  app.add_option("--gate-lb", o.gate_lb, "KDA gate lower bound")->capture_default_str();
  app.add_option("--situ-beta", o.situ_beta, "situ beta")->capture_default_str();
  app.add_option("--situ-linear-beta", o.situ_linear_beta, "situ linear beta")->capture_default_str();
  app.add_option("--weights-scale", o.weights_scale, "expert_weights_scale")->capture_default_str();
  app.add_flag("--softplus-gate", o.softplus_gate, "KDA decay gate without lower bound (softplus form)");
  app.add_flag("--no-q-lora", o.no_q_lora, "MLA with a plain attn_q projection");
  app.add_flag("--no-latent", o.no_latent, "experts at full width (no ffn_routed_*)");
  app.add_flag("--no-attn-gate", o.no_attn_gate, "MLA without output gate");
  app.add_flag("--no-routed-norm", o.no_routed_norm, "no latent RMS norm");
  app.add_flag("--no-shared", o.no_shared, "no shared experts");
  app.add_flag("--softmax-gating", o.softmax_gating, "softmax router instead of sigmoid");
  bool vision = false;
  std::string vision_preset = "tiny", mmproj_out, vision_type = "bf16", vision_interp;
  vision::VisionHParams vh = vision::vision_synth_preset("tiny", 0).hp;
  app.add_flag("--vision", vision, "also write a random vision tower and projector: an mmproj GGUF (and HF vision shards with --hf-dir)");
  app.add_option("--mmproj-out", mmproj_out, "mmproj path (default: mmproj-<name of --out>.gguf beside it)");
  app.add_option("--vision-preset", vision_preset, "tiny | k3 (K3's real vision dimensions)")->capture_default_str();
  app.add_option("--vision-type", vision_type, "type of every vision tensor: bf16 (as the checkpoint), f16, f32")->capture_default_str();
  app.add_option("--vision-layers", vh.n_layer, "vision blocks");
  app.add_option("--vision-width", vh.n_embd, "vision width C");
  app.add_option("--vision-heads", vh.n_head, "vision attention heads");
  app.add_option("--vision-head-dim", vh.head_dim, "vision head size (a multiple of 4)");
  app.add_option("--vision-ff", vh.n_ff, "vision MLP width");
  app.add_option("--vision-pos", vh.pos_h, "position table side (patches)");
  app.add_option("--vision-proj-hidden", vh.proj_hidden, "projector hidden width");
  app.add_option("--vision-patch-limit", vh.in_patch_limit, "in_patch_limit (patches per image before downscaling)");
  app.add_option("--vision-eps", vh.eps, "vision RMS-norm epsilon");
  app.add_option("--vision-proj-eps", vh.proj_eps, "projector RMS-norm epsilon");
  app.add_option("--vision-interp", vision_interp, "position-table interpolation: bicubic | bilinear");
  bool no_norm = false, quiet = false;
  app.add_flag("--no-weights-norm", no_norm, "do not renormalise the top-k weights");
  app.add_flag("--quiet,-q", quiet, "no progress output");
  app.add_option("-t,--threads", o.threads, "generator threads (default: all CPUs; the weights do not depend on it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (no_norm) o.weights_norm = false;
  if (!type.empty()) o.type = parse_type(type, "--type");
  if (!expert_type.empty()) o.expert_type = parse_type(expert_type, "--expert-type");
  for (const auto& ov : overrides) {
    const size_t eq = ov.find('=');
    if (eq == std::string::npos || eq == 0) fail("--tensor-type: expected NAME_PART=TYPE, got '%s'", ov.c_str());
    o.tensor_types.push_back({ov.substr(0, eq), parse_type(ov.substr(eq + 1), "--tensor-type")});
  }

  vision::VisionSynthOptions vo;
  if (vision) {
    // The preset, then the flags the user set.
    vo = vision::vision_synth_preset(vision_preset, o.n_embd);
    auto set = [&](const char* flag, uint32_t& field, uint32_t v) {
      if (app.count(flag)) field = v;
    };
    set("--vision-layers", vo.hp.n_layer, vh.n_layer);
    set("--vision-width", vo.hp.n_embd, vh.n_embd);
    set("--vision-heads", vo.hp.n_head, vh.n_head);
    set("--vision-head-dim", vo.hp.head_dim, vh.head_dim);
    set("--vision-ff", vo.hp.n_ff, vh.n_ff);
    set("--vision-pos", vo.hp.pos_h, vh.pos_h);
    set("--vision-proj-hidden", vo.hp.proj_hidden, vh.proj_hidden);
    set("--vision-patch-limit", vo.hp.in_patch_limit, vh.in_patch_limit);
    vo.hp.pos_w = vo.hp.pos_h;
    if (app.count("--vision-eps")) vo.hp.eps = vh.eps;
    if (app.count("--vision-proj-eps")) vo.hp.proj_eps = vh.proj_eps;
    if (!vision_interp.empty()) {
      if (vision_interp != "bicubic" && vision_interp != "bilinear")
        fail("--vision-interp: expected bicubic or bilinear, got '%s'", vision_interp.c_str());
      vo.hp.interp = vision_interp == "bicubic" ? vision::PosInterp::Bicubic : vision::PosInterp::Bilinear;
    }
    vo.hp.n_proj = o.n_embd;
    vo.type = parse_type(vision_type, "--vision-type");
    vo.seed = o.seed;
    vo.name = o.name + "-vision";
    if (mmproj_out.empty()) {
      const std::filesystem::path p(out);
      mmproj_out = (p.parent_path() / ("mmproj-" + p.stem().string() + ".gguf")).string();
    }
  } else if (!mmproj_out.empty()) {
    fail("--mmproj-out needs --vision");
  }

  const model::HParams hp = model::synth_hparams(o);
  if (!quiet) std::fprintf(stderr, "make-tiny: %s\n", hp.summary().c_str());
  uint64_t total = 0;  // progress only for large files
  model::for_each_tensor(hp, [&](const model::TensorRef& r) {
    const GgmlType t = model::synth_tensor_type(o, r.name, r.shape.ne[0], r.def.types);
    total += row_size(t, r.shape.ne[0]) * r.shape.ne[1] * r.shape.ne[2] * r.shape.ne[3];
  });
  if (!quiet) std::fprintf(stderr, "make-tiny: %.1f MiB\n", total / 1048576.0);
  {
    convert::Progress bar(!quiet && total > (256u << 20));
    bar.set_total(total, 1);
    const int slot = bar.begin("make-tiny " + out, total);
    model::write_synthetic(out, o, [&](uint64_t bytes, const std::string&) { bar.add(slot, bytes); });
    bar.end(slot, "make-tiny: " + convert::Progress::human_bytes(static_cast<double>(total)) + " generated");
    bar.stop();
  }
  if (!quiet) std::fprintf(stderr, "make-tiny: wrote %s (%zu tensors)\n", out.c_str(), model::tensor_count(hp));
  if (vision) {
    vision::write_synthetic_mmproj(mmproj_out, vo);
    if (!quiet) std::fprintf(stderr, "make-tiny: wrote %s (%s)\n", mmproj_out.c_str(), vo.hp.summary().c_str());
  }
  if (!hf_dir.empty()) {
    convert::HfLayout lay;
    if (vision) lay.mmproj = mmproj_out;
    convert::write_hf_checkpoint(out, hf_dir, lay);
    if (!quiet) std::fprintf(stderr, "make-tiny: wrote the Hugging Face checkpoint %s\n", hf_dir.c_str());
  }
  return 0;
}

K3_COMMAND("make-tiny", "write a random-initialised Kimi-K3 model (synthetic test bed)", cmd_make_tiny);
