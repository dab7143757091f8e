// k3 quantize against the files llama.cpp's own tools write, end to end, for the types of
// docs/formats.md: a synthetic Kimi-K3 in F32 (the eval model of docs/quantization.md), an
// importance matrix from `k3 imatrix` on text, then per type its plain recipe through
// `k3 quantize --imatrix`, and the same source with the same matrix and every tensor's type as k3
// chose it through ggml's ggml_quantize_chunk and gguf-py (tests/node/ggml_gguf.py --types-from):
// every tensor byte-identical, the type on experts and trunk (the rows its block divides; the rest
// take the fallbacks), and k3's file loads in llama.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "gguf/gguf.h"
#include "helpers.h"

using namespace k3;

namespace {

// One line a type.
const char* const kTypes[] = {
    "q1_0", "q2_0", "tq1_0", "tq2_0", "nvfp4", "iq3_xxs", "iq3_s",
    "iq2_xxs",
    "iq2_xs",
    "iq2_s",
    "iq1_s",
    "iq1_m",
};

struct Shared {
  qtest::TempDir dir{"k3q-ggml", qtest::TempDir::Base::Tmp};
  std::string src, imatrix, error;
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
  });
  return s;
}

class GgmlFiles : public testing::TestWithParam<const char*> {};

TEST_P(GgmlFiles, K3QuantizeIsByteIdenticalToGgml) {
  const Shared& s = shared();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string type = GetParam();
  const std::string k3_out = s.dir / (type + ".k3.gguf"), ggml_out = s.dir / (type + ".ggml.gguf");
  qtest::RunResult r = qtest::run(qtest::k3_bin() + " quantize -q -t 2 --imatrix " + s.imatrix + " " + s.src + " " + k3_out + " " + type);
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
    if (type_name(t->type) != type) continue;
    ++typed;
    (t->name.find("_exps.") != std::string::npos ? experts : trunk)++;
  }
  EXPECT_GT(experts, 0) << type << " on no routed expert stack";
  EXPECT_GT(trunk, 0) << type << " on no trunk matrix";
  r = qtest::run("node " + qtest::source_dir() + "/tests/node/llama.mjs load --model " + k3_out);
  EXPECT_EQ(r.status, 0) << type << ": llama.cpp cannot load k3's file: " << r.out;
  std::printf("[ggml files] %-8s %d tensors (%d expert stacks, %d trunk) byte-identical to ggml's; llama.cpp loads k3's file\n",
              type.c_str(), typed, experts, trunk);
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlFiles, testing::ValuesIn(kTypes), [](const auto& i) { return std::string(i.param); });

}  // namespace
