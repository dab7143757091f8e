// k3 quantize --target-size end to end on the synthetic model of docs/quantization.md: at the
// size of a uniform K3 recipe's file the sized mix is no larger and closer to the F32 model (mean
// KL divergence on a held-out text, with the same importance matrix); its rules give the same
// file again; rules pin what they match; a budget below the smallest mix is refused before
// anything is written; the plan is deterministic.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "helpers.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {

class TargetSize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new qtest::TempDir("k3q-size", qtest::TempDir::Base::Memory);
    qtest::write_eval_model(path("ev.gguf"), 1.0, qtest::synth_options(GgmlType::F32, GgmlType::F32, 11));
    qtest::write_file(path("calib.txt"), qtest::make_text(1, 20000));
    qtest::write_file(path("eval.txt"), qtest::make_text(2, 20000));
    ok(k3("imatrix -m " + path("ev.gguf") + " -f " + path("calib.txt") + " -o " + path("ev.imatrix") +
          " -c 128 --chunks 16 -t 2"));
    ok(k3("perplexity -m " + path("ev.gguf") + " -f " + path("eval.txt") + " " + kPpl + " --save-kl-base " +
          path("ev.kl")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& f) { return *dir_ / f; }
  static qtest::RunResult k3(const std::string& args) { return qtest::run(qtest::k3_bin() + " " + args); }
  static void ok(const qtest::RunResult& r) { ASSERT_EQ(r.status, 0) << r.out; }
  static double mean_kld(const std::string& model) {
    const std::string json = model + ".ppl.json";
    const qtest::RunResult r = k3("perplexity -m " + model + " -f " + path("eval.txt") + " " + kPpl + " --kl-base " +
                                  path("ev.kl") + " --json " + json);
    EXPECT_EQ(r.status, 0) << r.out;
    std::ifstream f(json);
    return nlohmann::json::parse(f)["kl"]["mean_kld"].get<double>();
  }
  static std::string slurp(const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static constexpr const char* kPpl = "-c 128 --chunks 16 -t 2 -q";
  static qtest::TempDir* dir_;
};
qtest::TempDir* TargetSize::dir_ = nullptr;

TEST_F(TargetSize, BeatsTheUniformRecipesAtTheirSize) {
  const std::string im = " --imatrix " + path("ev.imatrix") + " -q -t 2";
  for (const std::string recipe : {"Q2_K_K3", "Q4_K_K3"}) {
    const std::string uniform = path("u-" + recipe + ".gguf"), sized = path("t-" + recipe + ".gguf");
    ok(k3("quantize " + path("ev.gguf") + " " + uniform + " " + recipe + im));
    const uint64_t budget = fs::file_size(uniform);
    const std::string rules = path("t-" + recipe + ".rules");
    ok(k3("quantize " + path("ev.gguf") + " " + sized + " --target-size " + std::to_string(budget) +
          " --save-tensor-types " + rules + im));
    EXPECT_LE(fs::file_size(sized), budget) << recipe;
    const double ku = mean_kld(uniform), ks = mean_kld(sized);
    std::printf("%s: %llu bytes, mean KLD %.5f; --target-size: %llu bytes, mean KLD %.5f\n", recipe.c_str(),
                static_cast<unsigned long long>(budget), ku, static_cast<unsigned long long>(fs::file_size(sized)), ks);
    EXPECT_LT(ks, ku) << recipe;
    // The saved rules alone give the same file.
    const std::string again = path("r-" + recipe + ".gguf");
    ok(k3("quantize " + path("ev.gguf") + " " + again + " --tensor-type-file " + rules + im));
    EXPECT_TRUE(slurp(again) == slurp(sized)) << recipe;
  }
}

TEST_F(TargetSize, RulesPinAndTheDryRunIsDeterministic) {
  const std::string cmd = "quantize " + path("ev.gguf") + " " + path("dry.gguf") +
                          " --target-size 8M --tensor-type ffn_down_exps=q8_0 --dry-run -q -t 2";
  const qtest::RunResult a = k3(cmd), b = k3(cmd);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(fs::exists(path("dry.gguf")));
  EXPECT_EQ(a.out.find("ffn_down_exps "), std::string::npos) << "a pinned group was sized:\n" << a.out;
  EXPECT_NE(a.out.find("rule 'ffn_down_exps=q8_0'"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("predicted file"), std::string::npos) << a.out;
  // Without an importance matrix the types that need one are named, not used.
  EXPECT_NE(a.out.find("not considered without an importance matrix (make one with k3 imatrix): iq2_xxs iq2_xs iq1_s"),
            std::string::npos)
      << a.out;
}

TEST_F(TargetSize, BudgetsThatCannotBeMetAreRefusedBeforeWriting) {
  const std::string out = path("small.gguf");
  qtest::RunResult r = k3("quantize " + path("ev.gguf") + " " + out + " --target-size 1M -q");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("smaller than the smallest mix"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  for (const char* bad : {"12X", "0", "-5G", "G", "1.2.3M"}) {
    r = k3("quantize " + path("ev.gguf") + " " + out + " --target-size " + bad + " -q");
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.out.find("--target-size"), std::string::npos) << bad << ": " << r.out;
  }
  r = k3("quantize " + path("ev.gguf") + " " + out + " Q4_K --target-size 5M -q");
  EXPECT_NE(r.out.find("give no TYPE"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
