// Writes the synthetic Kimi-K3 the quantizer's quality numbers are measured on
// (docs/quantization.md; see write_eval_model in helpers.h).
// usage: quantize_make_eval_model OUT.gguf [--norm-sigma 1.0] [--experts-used 2] [--seed 11]
//                                 [--type f32] [--expert-type f32] [--calib FILE] [--eval FILE]
// --calib / --eval also write the calibration and held-out texts (20,000 words each).
#include <cstdio>
#include <string>

#include "common/error.h"
#include "helpers.h"
#include "tensor/types.h"

using namespace k3;

int main(int argc, char** argv) {
  if (argc < 2 || argc % 2 != 0) {
    std::fprintf(stderr,
                 "usage: %s OUT.gguf [--norm-sigma S] [--experts-used K] [--seed N] [--type T] [--expert-type T] "
                 "[--calib FILE] [--eval FILE]\n",
                 argv[0]);
    return 2;
  }
  try {
    double sigma = 1.0;
    std::string calib, eval;
    model::SynthOptions o = qtest::synth_options(GgmlType::F32, GgmlType::F32, 11);
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--norm-sigma") sigma = std::stod(v);
      else if (k == "--experts-used") o.n_expert_used = static_cast<uint32_t>(std::stoul(v));
      else if (k == "--seed") o.seed = std::stoull(v);
      else if (k == "--calib") calib = v;
      else if (k == "--eval") eval = v;
      else if (k == "--type" || k == "--expert-type") {
        const TypeInfo* t = type_by_name(v);
        if (!t) fail("unknown type '%s'", v.c_str());
        (k == "--type" ? o.type : o.expert_type) = t->type;
      } else {
        fail("unknown option '%s'", k.c_str());
      }
    }
    qtest::write_eval_model(argv[1], sigma, o);
    if (!calib.empty()) qtest::write_file(calib, qtest::make_text(1, 20000));
    if (!eval.empty()) qtest::write_file(eval, qtest::make_text(2, 20000));
    std::printf("wrote %s\n", argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
