// k3 quantize against the files llama.cpp's own tools write, end to end, for the types of
// docs/formats.md: a synthetic Kimi-K3 in F32 (the eval model of docs/quantization.md), an
// importance matrix from `k3 imatrix` on text, then per type its plain recipe through
// `k3 quantize --imatrix` (and the named recipes on the source as gguf-py rewrote it), and the same
// source with the same matrix and every tensor's type as k3 chose it through ggml's
// ggml_quantize_chunk and gguf-py (tests/node/ggml_gguf.py --types-from): every tensor
// byte-identical, the types on experts and trunk (the rows their block divides; the rest take the
// fallbacks), and k3's file loads in llama.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "gguf/gguf.h"
#include "helpers.h"

using namespace k3;

namespace {

// What k3 quantize is given (a type, or a named recipe) and the types it must put on the routed
// experts and on the trunk matrices that the block divides.
struct Case {
  const char *arg, *experts, *trunk;
};
const Case kCases[] = {
    {"q1_0", "q1_0", "q1_0"}, {"q2_0", "q2_0", "q2_0"}, {"tq1_0", "tq1_0", "tq1_0"}, {"tq2_0", "tq2_0", "tq2_0"},
    {"nvfp4", "nvfp4", "nvfp4"}, {"iq3_xxs", "iq3_xxs", "iq3_xxs"}, {"iq3_s", "iq3_s", "iq3_s"},
    {"iq2_xxs", "iq2_xxs", "iq2_xxs"}, {"iq2_xs", "iq2_xs", "iq2_xs"}, {"iq2_s", "iq2_s", "iq2_s"},
    {"iq1_s", "iq1_s", "iq1_s"}, {"iq1_m", "iq1_m", "iq1_m"},
    // The named recipes of docs/quantization.md, run on the source as gguf-py rewrote it.
    {"IQ2_XXS_K3", "iq2_xxs", "q4_K"}, {"IQ1_S_K3", "iq1_s", "q4_K"}, {"Q1_0_K3", "q1_0", "q4_K"},
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.arg; }

struct Shared {
  qtest::TempDir dir{"k3q-ggml", qtest::TempDir::Base::Tmp};
  std::string src, theirs, imatrix, error;  // theirs: src as gguf-py writes it (another writer)
};

// The source model and its imatrix, made once for every type.
const Shared& shared() {
  static Shared s;
  static std::once_flag once;
  std::call_once(once, [] {
    s.src = s.dir / "src.gguf";
    model::SynthOptions o = qtest::synth_options(GgmlType::F32, GgmlType::F32, 5);
    qtest::write_eval_model(s.src, 1.0, o);
    qtest::write_file(s.dir / "calib.txt", qtest::make_text(3, 600));
    s.imatrix = s.dir / "im.gguf";
    const qtest::RunResult r = qtest::run(qtest::k3_bin() + " imatrix -m " + s.src + " -f " + (s.dir / "calib.txt") +
                                          " -c 64 -t 2 -o " + s.imatrix);
    if (r.status != 0) s.error = "k3 imatrix failed: " + r.out;
    s.theirs = s.dir / "src.gguf-py.gguf";
    const qtest::RunResult w = qtest::run("/usr/bin/python3 " + qtest::source_dir() + "/tests/node/ggml_gguf.py " + s.src +
                                          " " + s.theirs);
    if (w.status != 0) s.error += "ggml_gguf.py failed: " + w.out;
  });
  return s;
}

class GgmlFiles : public testing::TestWithParam<Case> {};

TEST_P(GgmlFiles, K3QuantizeIsByteIdenticalToGgml) {
  const Shared& s = shared();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const Case c = GetParam();
  const std::string type = c.arg, in = type == c.experts ? s.src : s.theirs;
  const std::string k3_out = s.dir / (type + ".k3.gguf"), ggml_out = s.dir / (type + ".ggml.gguf");
  qtest::RunResult r = qtest::run(qtest::k3_bin() + " quantize -q -t 2 --imatrix " + s.imatrix + " " + in + " " + k3_out + " " + type);
  ASSERT_EQ(r.status, 0) << r.out;
  r = qtest::run("/usr/bin/python3 " + qtest::source_dir() + "/tests/node/ggml_gguf.py " + s.src + " " + ggml_out +
                 " --types-from " + k3_out + " --imatrix " + s.imatrix);
  ASSERT_EQ(r.status, 0) << r.out;
  const gguf::Model mine = gguf::Model::open(k3_out), theirs = gguf::Model::open(ggml_out);
  ASSERT_EQ(mine.tensors().size(), theirs.tensors().size());
  int typed = 0, experts = 0, trunk = 0;
  for (const gguf::TensorInfo* t : mine.tensors()) {
    const gguf::TensorInfo* g = theirs.find(t->name);
    ASSERT_NE(g, nullptr) << t->name;
    ASSERT_EQ(t->type, g->type) << t->name;
    ASSERT_EQ(t->nbytes, g->nbytes) << t->name;
    EXPECT_EQ(std::memcmp(t->data, g->data, t->nbytes), 0) << type << ": tensor '" << t->name << "' (" << type_name(t->type)
                                                           << ") differs from ggml's";
    const bool exps = t->name.find("_exps.") != std::string::npos;
    if (type_name(t->type) != (exps ? c.experts : c.trunk)) continue;
    ++typed;
    (exps ? experts : trunk)++;
  }
  EXPECT_GT(experts, 0) << type << ": " << c.experts << " on no routed expert stack";
  EXPECT_GT(trunk, 0) << type << ": " << c.trunk << " on no trunk matrix";
  r = qtest::run("node " + qtest::source_dir() + "/tests/node/llama.mjs load --model " + k3_out);
  EXPECT_EQ(r.status, 0) << type << ": llama.cpp cannot load k3's file: " << r.out;
  std::printf("[ggml files] %-10s %d tensors %s/%s (%d expert stacks, %d trunk), all byte-identical to ggml's; llama.cpp loads k3's file\n",
              type.c_str(), typed, c.experts, c.trunk, experts, trunk);
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlFiles, testing::ValuesIn(kCases), [](const auto& i) { return std::string(i.param.arg); });

}  // namespace
