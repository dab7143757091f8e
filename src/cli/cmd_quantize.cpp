// k3 quantize: a (split) Kimi-K3 GGUF to another type or recipe, streaming, with an error report.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "common/error.h"
#include "quantize/imatrix.h"
#include "quantize/quantizer.h"
#include "quantize/recipe.h"
#include "quantize/target_size.h"
#include "tensor/threadpool.h"

using namespace k3;

namespace {

// N, N.NK, NM, NG or NT (powers of 1024) as bytes; `what` names the flag in errors.
uint64_t parse_size(const std::string& s, const char* what) {
  if (s.empty()) fail("%s: empty value", what);
  double mult = 1;
  std::string digits = s;
  switch (s.back()) {
    case 'K': case 'k': mult = 0x1p10; break;
    case 'M': case 'm': mult = 0x1p20; break;
    case 'G': case 'g': mult = 0x1p30; break;
    case 'T': case 't': mult = 0x1p40; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  const bool ok = !digits.empty() && digits.find_first_not_of("0123456789.") == std::string::npos &&
                  std::count(digits.begin(), digits.end(), '.') <= 1 && digits != ".";
  if (!ok) fail("%s: expected N, NK, NM, NG or NT (N may have a fraction: 1.5T), got '%s'", what, s.c_str());
  const double v = std::stod(digits) * mult;
  if (!(v >= 1) || v > 0x1p63) fail("%s: '%s' is out of range", what, s.c_str());
  return static_cast<uint64_t>(v);
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

void print_sizing(const quant::SizedPlan& sp, uint64_t target) {
  std::string cands;
  for (GgmlType t : sp.candidates) cands += std::string(cands.empty() ? "" : " ") + type_name(t);
  std::printf("--target-size %.2f MiB: candidates %s\n", mib(target), cands.c_str());
  if (!sp.need_imatrix.empty()) {
    std::string need;
    for (GgmlType t : sp.need_imatrix) need += std::string(need.empty() ? "" : " ") + type_name(t);
    std::printf("  not considered without an importance matrix (make one with k3 imatrix): %s\n", need.c_str());
  }
  std::printf("%-28s %-8s %10s %12s  %s\n", "group", "type", "MiB", "error", "other candidates (type MiB error)");
  for (const auto& g : sp.groups) {
    const auto& c = g.candidates[g.chosen];
    std::string others;
    for (size_t i = 0; i < g.candidates.size(); ++i)
      if (i != g.chosen)
        others += strprintf("%s%s %.3f %.3g", others.empty() ? "" : ", ", type_name(g.candidates[i].type),
                            mib(g.candidates[i].bytes), g.candidates[i].err);
    std::printf("%-28s %-8s %10.3f %12.4g  %s\n", g.name.c_str(), type_name(c.type), mib(c.bytes), c.err, others.c_str());
  }
  std::printf("sized tensors %.2f MiB, pinned and F32 %.2f MiB, header and padding %.2f MiB (estimated): "
              "predicted file %.2f MiB of %.2f MiB; smallest mix %.2f MiB; total error %.4g\n\n",
              mib(sp.plan.out_bytes - sp.fixed_bytes), mib(sp.fixed_bytes), mib(sp.overhead_bytes), mib(sp.file_bytes),
              mib(target), mib(sp.min_bytes), sp.err);
}

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a Kimi-K3 GGUF (one file or the first part of a split set).", "k3 quantize"};
  app.footer(recipe_help());
  std::string in_path, out_path, type_name_arg, imatrix_path, stats_imatrix_path, report_path, split_size;
  std::string target_size, rules_file, save_rules;
  std::vector<std::string> rules_text;
  int threads = 0;
  bool keep_split = false, dry_run = false, quiet = false, per_tensor = false;
  app.add_option("IN", in_path, "input GGUF")->required();
  app.add_option("OUT", out_path, "output GGUF (split parts: OUT minus .gguf + -0000i-of-0000N.gguf)")->required();
  app.add_option("TYPE", type_name_arg, "ggml type or recipe (see below); not with --target-size");
  app.add_option("--tensor-type", rules_text, "REGEX=TYPE: tensors whose name matches REGEX get TYPE (first match wins)");
  app.add_option("--tensor-type-file", rules_file, "REGEX=TYPE rules, one a line ('#' comments), after --tensor-type's");
  app.add_option("--target-size", target_size,
                 "N[K|M|G|T]: choose every tensor group's type by measured error so that the file fits in N bytes "
                 "(rules pin what they match; --imatrix weights the error and admits the types that need one)");
  app.add_option("--save-tensor-types", save_rules, "write the chosen types as rules for --tensor-type-file");
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

  if (!target_size.empty() && !type_name_arg.empty()) fail("--target-size chooses the types: give no TYPE with it");
  if (target_size.empty() && type_name_arg.empty() && rules_file.empty())
    fail("give a TYPE (a ggml type or recipe), --target-size or --tensor-type-file");
  if (!save_rules.empty() && target_size.empty()) fail("--save-tensor-types writes what --target-size chose");
  // Without a TYPE the rules decide every tensor, and the file type follows the mix.
  const bool mix = type_name_arg.empty();
  const quant::Recipe recipe = mix ? quant::sized_base_recipe() : quant::recipe_by_name(type_name_arg);
  if (!rules_file.empty())
    for (const auto& r : quant::read_rules_file(rules_file)) rules_text.push_back(r);
  std::vector<quant::UserRule> rules;
  for (const auto& r : rules_text) rules.push_back(quant::parse_rule(r));
  const gguf::Model in = gguf::Model::open(in_path);

  quant::Imatrix im, stats_im;
  quant::Options opt;
  opt.recipe_name = recipe.name;
  opt.threads = threads > 0 ? threads : ThreadPool::hardware_threads();
  if (!imatrix_path.empty()) {
    im = quant::Imatrix::load(imatrix_path);
    im.check_model(in);
    opt.imatrix = &im;
  }
  quant::Plan plan;
  if (target_size.empty()) {
    plan = quant::make_plan(in, recipe, rules);
    if (mix) quant::set_mix_file_type(plan);
  } else {
    quant::SizeOptions so;
    so.target_bytes = parse_size(target_size, "--target-size");
    so.imatrix = opt.imatrix;
    so.threads = opt.threads;
    const auto t0 = std::chrono::steady_clock::now();
    if (!quiet)
      so.progress = [t0](size_t i, size_t n, uint64_t elems) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\rk3 quantize: measuring the candidates on tensor %zu/%zu, %.1f M elements/s, ETA %.0f s ",
                     i, n, s > 0 ? elems / s / 1e6 : 0.0, s / static_cast<double>(i) * static_cast<double>(n - i));
        if (i == n) std::fputc('\n', stderr);
      };
    quant::SizedPlan sp = quant::size_plan(in, rules, so);
    print_sizing(sp, so.target_bytes);
    if (!save_rules.empty()) {
      const std::string tmp = save_rules + ".tmp";
      std::ofstream f(tmp);
      f << quant::rules_text(sp, in_path);
      f.close();
      if (!f || std::rename(tmp.c_str(), save_rules.c_str()) != 0) fail("cannot write '%s'", save_rules.c_str());
    }
    plan = std::move(sp.plan);
  }
  for (const auto& w : plan.warnings) std::fprintf(stderr, "k3 quantize: warning: %s\n", w.c_str());
  if (!stats_imatrix_path.empty()) {
    stats_im = quant::Imatrix::load(stats_imatrix_path);
    stats_im.check_model(in);
    opt.stats_weights = &stats_im;
  }
  if (keep_split) opt.split = quant::SplitMode::Keep;
  if (!split_size.empty()) {
    opt.split = quant::SplitMode::MaxSize;
    opt.split_max_bytes = parse_size(split_size, "--split-max-size");
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
