// k3 quantize: a (split) Kimi-K3 GGUF to another type or recipe, streaming, with an error report.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "common/error.h"
#include "quantize/imatrix.h"
#include "quantize/quantizer.h"
#include "quantize/recipe.h"
#include "tensor/threadpool.h"

using namespace k3;

namespace {

uint64_t parse_size(const std::string& s) {
  if (s.empty()) fail("--split-max-size: empty value");
  uint64_t mult = 1;
  std::string digits = s;
  switch (s.back()) {
    case 'K': case 'k': mult = uint64_t{1} << 10; break;
    case 'M': case 'm': mult = uint64_t{1} << 20; break;
    case 'G': case 'g': mult = uint64_t{1} << 30; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    fail("--split-max-size: expected N, NK, NM or NG, got '%s'", s.c_str());
  return std::stoull(digits) * mult;
}

std::string recipe_help() {
  std::string s = "TYPE is a ggml type (every quantizable matrix gets it) or a Kimi-K3 recipe:\n";
  for (const auto& r : quant::recipes())
    s += strprintf("  %-10s file_type %2u  %s\n", r.name.c_str(), r.file_type, r.description.c_str());
  s += "Always F32: norms, biases, ssm_conv1d_*, score vectors, ssm_a and every 1-D tensor. The router\n"
       "ffn_gate_inp stays F32 unless a --tensor-type rule names it.\n"
       "Rows that do not divide into the type's blocks fall back (quant-formats.md §9): Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0,\n"
       "Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS/IQ2_XXS/IQ2_XS/IQ2_S/IQ1_S/IQ1_M -> IQ4_NL, then F16.\n"
       "IQ2_XXS, IQ2_XS and IQ1_S need --imatrix (make one with `k3 imatrix`).\n";
  return s;
}

double mib(uint64_t b) { return static_cast<double>(b) / (1 << 20); }

void print_plan(const quant::Plan& plan) {
  std::printf("%-36s %-22s %-6s    %-7s %10s %10s  %s\n", "tensor", "shape", "from", "to", "MiB in", "MiB out", "why");
  for (const auto& t : plan.tensors)
    std::printf("%-36s %-22s %-6s -> %-7s %10.3f %10.3f  %s\n", t.src->name.c_str(), t.src->shape_string().c_str(),
                type_name(t.src->type), type_name(t.type), mib(t.src->nbytes), mib(t.out_bytes), t.why.c_str());
  std::printf("\n%zu tensors, %.2f MiB -> %.2f MiB, %.3f bits per weight, general.file_type %u\n", plan.tensors.size(),
              mib(plan.in_bytes), mib(plan.out_bytes),
              plan.n_elements ? 8.0 * static_cast<double>(plan.out_bytes) / static_cast<double>(plan.n_elements) : 0.0,
              plan.file_type);
}

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a Kimi-K3 GGUF (one file or the first part of a split set).", "k3 quantize"};
  app.footer(recipe_help());
  std::string in_path, out_path, type_name_arg, imatrix_path, stats_imatrix_path, report_path, split_size;
  std::vector<std::string> rules_text;
  int threads = 0;
  bool keep_split = false, dry_run = false, quiet = false, per_tensor = false;
  app.add_option("IN", in_path, "input GGUF")->required();
  app.add_option("OUT", out_path, "output GGUF (split parts: OUT minus .gguf + -0000i-of-0000N.gguf)")->required();
  app.add_option("TYPE", type_name_arg, "ggml type or recipe (see below)")->required();
  app.add_option("--tensor-type", rules_text, "REGEX=TYPE: tensors whose name matches REGEX get TYPE (first match wins)");
  app.add_option("--imatrix", imatrix_path, "importance matrix (llama.cpp imatrix GGUF) for the scale searches");
  app.add_option("--stats-imatrix", stats_imatrix_path,
                 "importance matrix that only weights the reported error (default: --imatrix)");
  auto* ks = app.add_flag("--keep-split", keep_split, "write the same parts as the input split set");
  app.add_option("--split-max-size", split_size, "write a split set with at most N[K|M|G] bytes of tensors per part")
      ->excludes(ks);
  app.add_option("-t,--threads", threads, "threads (default: all CPUs)");
  app.add_flag("--dry-run", dry_run, "print the plan (types and sizes) without writing");
  app.add_option("--report", report_path, "write the error report as JSON to this file");
  app.add_flag("--per-tensor", per_tensor, "print the error of every tensor, not only the class summary");
  app.add_flag("-q,--quiet", quiet, "no progress lines");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const quant::Recipe& recipe = quant::recipe_by_name(type_name_arg);
  std::vector<quant::UserRule> rules;
  for (const auto& r : rules_text) rules.push_back(quant::parse_rule(r));
  const gguf::Model in = gguf::Model::open(in_path);
  const quant::Plan plan = quant::make_plan(in, recipe, rules);
  for (const auto& w : plan.warnings) std::fprintf(stderr, "k3 quantize: warning: %s\n", w.c_str());

  quant::Imatrix im, stats_im;
  quant::Options opt;
  opt.recipe_name = recipe.name;
  opt.threads = threads > 0 ? threads : ThreadPool::hardware_threads();
  if (!imatrix_path.empty()) {
    im = quant::Imatrix::load(imatrix_path);
    im.check_model(in);
    opt.imatrix = &im;
  }
  if (!stats_imatrix_path.empty()) {
    stats_im = quant::Imatrix::load(stats_imatrix_path);
    stats_im.check_model(in);
    opt.stats_weights = &stats_im;
  }
  if (keep_split) opt.split = quant::SplitMode::Keep;
  if (!split_size.empty()) {
    opt.split = quant::SplitMode::MaxSize;
    opt.split_max_bytes = parse_size(split_size);
  }
  if (dry_run) {
    print_plan(plan);
    for (const auto& p : quant::output_paths(in, plan, out_path, opt)) std::printf("would write %s\n", p.c_str());
    return 0;
  }
  if (!quiet)
    opt.progress = [](size_t i, size_t n, const quant::TensorPlan& t) {
      std::fprintf(stderr, "[%4zu/%4zu] %-36s %-22s %6s -> %-7s %10.3f MiB\n", i + 1, n, t.src->name.c_str(),
                   t.src->shape_string().c_str(), type_name(t.src->type), type_name(t.type), mib(t.out_bytes));
    };
  const quant::Report rep = quant::quantize_model(in, plan, out_path, opt);
  std::printf("%s -> %s (%s): %.2f MiB -> %.2f MiB\n\n", rep.input.c_str(), rep.output.c_str(), recipe.name.c_str(),
              mib(rep.in_bytes), mib(rep.out_bytes));
  rep.print_table(stdout, per_tensor);
  if (!report_path.empty()) {
    std::ofstream f(report_path);
    f << rep.to_json().dump(1) << '\n';
    if (!f) fail("cannot write report '%s'", report_path.c_str());
  }
  return 0;
}

}  // namespace

K3_COMMAND("quantize", "quantize a Kimi-K3 GGUF to a type or recipe, with an error report", cmd_quantize);
