// The size of every quantization recipe at Kimi-K3's real shapes (93 layers, 896 experts), from
// the same plan k3 quantize makes (quant::plan_for_shapes: the converter's BF16 / MXFP4 / F32
// source, the recipe, its rules and fallbacks), and which memory sizes hold it together with the
// KV and recurrent state of one sequence at a given context: docs/quantization.md's table.
//   bin/recipe_sizes [--ctx N] [TYPE... | TRUNK+EXPERTS...]   (default: every recipe and type k3 writes)
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/state.h"
#include "model/synthetic.h"
#include "quantize/recipe.h"

using namespace k3;

int main(int argc, char** argv) {
  int64_t ctx = 65536;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ctx") && i + 1 < argc) ctx = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::printf("usage: recipe_sizes [--ctx N] [TYPE... | TRUNK+EXPERTS (q4_K+iq1_s)...]\n");
      return 0;
    } else names.emplace_back(argv[i]);
  }
  model::SynthOptions o = model::synth_preset("k3-slice");
  o.n_layer = 93;
  const model::HParams hp = model::synth_hparams(o);
  const double state = static_cast<double>(model::state_bytes(hp, ctx));
  if (names.empty())
    for (const auto& r : quant::recipes()) names.push_back(r.name);
  const double gib = 1024.0 * 1024 * 1024;
  const int ram[] = {256, 384, 512, 768, 1024, 1536};
  std::printf("Kimi-K3 at its real shapes (93 layers, 896 experts of 3072 x 3584); state of one sequence at %lld "
              "tokens: %.1f GiB\n\n",
              static_cast<long long>(ctx), state / gib);
  std::printf("| recipe | experts | rest | bpw | GB | GiB | fits in (GiB of RAM, with the state) |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& n : names) {
    // TRUNK+EXPERTS (q4_K+iq1_s): a mix as --tensor-type '_exps=EXPERTS' over TRUNK gives it,
    // with the K3 recipes' rules
    quant::Recipe mix;
    if (const size_t plus = n.find('+'); plus != std::string::npos) {
      const TypeInfo* d = type_by_name(n.substr(0, plus));
      const TypeInfo* e = type_by_name(n.substr(plus + 1));
      if (!d || !e) {
        std::fprintf(stderr, "recipe_sizes: unknown type in '%s'\n", n.c_str());
        return 1;
      }
      mix = quant::sized_base_recipe();  // its rules: attn_k_b / attn_v_b in BF16
      mix.name = n;
      mix.dense = d->type;
      mix.experts = e->type;
    }
    const quant::Recipe& r = n.find('+') != std::string::npos ? mix : quant::recipe_by_name(n);
    const quant::Plan p = quant::plan_for_shapes(hp, r, {});
    const double b = static_cast<double>(p.out_bytes);
    std::string fits = "—";
    for (int g : ram)
      if (b + state <= g * gib) {
        fits = std::to_string(g);
        break;
      }
    std::printf("| %s | %s | %s | %.3f | %.0f | %.0f | %s |\n", r.name.c_str(), type_name(r.experts), type_name(r.dense),
                8 * b / static_cast<double>(p.n_elements), b / 1e9, b / gib, fits.c_str());
  }
  return 0;
}
