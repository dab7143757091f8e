// Perplexity and KL divergence against a reference model's saved log-probabilities, on a
// synthetic Kimi-K3 and its quantizations; with an observer-capable model, the importance matrix
// collected on one text lowers the KL divergence on another.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "helpers.h"
#include "model/model.h"
#include "quantize/imatrix.h"
#include "quantize/perplexity.h"
#include "quantize/quantizer.h"
#include "tensor/threadpool.h"
#include "tokenizer/tokenizer.h"

using namespace k3;

namespace {

class Perplexity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new qtest::TempDir("k3q-ppl", qtest::TempDir::Base::Memory);
    qtest::write_eval_model(*dir_ / "f32.gguf", 1.0, qtest::synth_options(GgmlType::F32, GgmlType::F32, 11));
    qtest::write_file(*dir_ / "eval.txt", qtest::make_text(2, 3000));
    qtest::write_file(*dir_ / "calib.txt", qtest::make_text(1, 3000));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& f) { return *dir_ / f; }
  static std::vector<int32_t> tokens(const model::Model& m, const std::string& file) {
    std::ifstream f(file);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return tok::Tokenizer::from_metadata(m.meta())->encode(text, false);
  }
  static std::string quantize(const std::string& recipe, const quant::Imatrix* im = nullptr) {
    const std::string out = path(recipe + (im ? "-im" : "") + ".gguf");
    const gguf::Model in = gguf::Model::open(path("f32.gguf"));
    quant::Options opt;
    opt.threads = 2;
    opt.imatrix = im;
    quant::quantize_model(in, quant::make_plan(in, quant::recipe_by_name(recipe), {}), out, opt);
    return out;
  }
  static quant::KlStats kl_against_base(const std::string& model_path, const quant::PplOptions& o) {
    auto m = model::Model::load(model_path);
    const std::vector<int32_t> t = tokens(*m, path("eval.txt"));
    auto base = quant::KlBase::open(path("base.kl"), m->n_vocab(), o.n_ctx, t, quant::count_chunks(t.size(), o));
    quant::KlStats kl;
    quant::perplexity(*m, t, o, nullptr, base.get(), &kl);
    return kl;
  }
  static void save_base(const quant::PplOptions& o) {
    if (std::filesystem::exists(path("base.kl"))) return;
    auto m = model::Model::load(path("f32.gguf"));
    const std::vector<int32_t> t = tokens(*m, path("eval.txt"));
    auto save = quant::KlBase::create(path("base.kl"), m->n_vocab(), o.n_ctx, o.n_ctx / 2, t, quant::count_chunks(t.size(), o));
    quant::perplexity(*m, t, o, save.get(), nullptr, nullptr);
    save->finish();
  }
  static quant::PplOptions opts() {
    quant::PplOptions o;
    o.n_ctx = 64;
    o.n_batch = 64;
    o.max_chunks = 6;
    o.threads = 2;
    return o;
  }
  static qtest::TempDir* dir_;
};
qtest::TempDir* Perplexity::dir_ = nullptr;

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

}  // namespace

TEST(KlStats, IdenticalDistributionsAndLogSoftmax) {
  const float logits[4] = {1.f, 3.f, -2.f, 0.5f};
  float lp[4];
  quant::log_softmax(logits, lp, 4);
  double s = 0;
  for (float v : lp) s += std::exp(static_cast<double>(v));
  EXPECT_NEAR(s, 1.0, 1e-6);
  quant::KlStats k;
  k.add(lp, lp, 4, 1);
  EXPECT_EQ(k.kld[0], 0.0);
  EXPECT_EQ(k.same_top, 1);
  EXPECT_EQ(k.dp[0], 0.0);
  const float other[4] = {3.f, 1.f, -2.f, 0.5f};
  float lq[4];
  quant::log_softmax(other, lq, 4);
  k.add(lp, lq, 4, 1);
  EXPECT_GT(k.kld[1], 0.1);
  EXPECT_EQ(k.same_top, 1);
  EXPECT_LT(k.dp[1], 0.0);
}

TEST_F(Perplexity, SelfIsZeroAndQuantizationOrders) {
  const quant::PplOptions o = opts();
  save_base(o);
  const quant::KlStats self = kl_against_base(path("f32.gguf"), o);
  ASSERT_EQ(self.kld.size(), static_cast<size_t>(6 * (64 - 1 - 32)));
  EXPECT_LT(mean(self.kld), 1e-9);
  EXPECT_EQ(self.same_top, static_cast<int64_t>(self.kld.size()));
  const quant::KlStats q8 = kl_against_base(quantize("Q8_0"), o);
  const quant::KlStats q4 = kl_against_base(quantize("Q4_K"), o);
  const quant::KlStats q2 = kl_against_base(quantize("Q2_K"), o);
  std::printf("mean KLD: Q8_0 %.5f, Q4_K %.5f, Q2_K %.5f; top-1: %.3f %.3f %.3f\n", mean(q8.kld), mean(q4.kld),
              mean(q2.kld), double(q8.same_top) / q8.kld.size(), double(q4.same_top) / q4.kld.size(),
              double(q2.same_top) / q2.kld.size());
  EXPECT_GT(mean(q8.kld), 0.0);
  EXPECT_LT(mean(q8.kld), mean(q4.kld));
  EXPECT_LT(mean(q4.kld), mean(q2.kld));
  EXPECT_GE(q8.same_top, q2.same_top);
}

TEST_F(Perplexity, BaseFileMismatchesAreErrors) {
  const quant::PplOptions o = opts();
  save_base(o);
  auto m = model::Model::load(path("f32.gguf"));
  std::vector<int32_t> t = tokens(*m, path("eval.txt"));
  EXPECT_THROW(quant::KlBase::open(path("base.kl"), m->n_vocab(), 32, t, 2), Error);
  EXPECT_THROW(quant::KlBase::open(path("base.kl"), m->n_vocab() + 1, 64, t, 2), Error);
  EXPECT_THROW(quant::KlBase::open(path("base.kl"), m->n_vocab(), 64, t, 100), Error);
  t[70] = (t[70] + 1) % m->n_vocab();
  try {
    quant::KlBase::open(path("base.kl"), m->n_vocab(), 64, t, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another text"), std::string::npos) << e.what();
  }
}

TEST_F(Perplexity, Cli) {
  const std::string k3 = qtest::k3_bin(), q = quantize("Q4_K");
  auto r = qtest::run(k3 + " perplexity -m " + path("f32.gguf") + " -f " + path("eval.txt") +
                      " -c 64 --chunks 2 -t 2 -q --save-kl-base " + path("cli.kl"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("PPL = "), std::string::npos) << r.out;
  r = qtest::run(k3 + " perplexity -m " + q + " -f " + path("eval.txt") + " -c 64 --chunks 2 -t 2 -q --kl-base " +
                 path("cli.kl") + " --json " + path("cli.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("top-1 agreement"), std::string::npos) << r.out;
  std::ifstream f(path("cli.json"));
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["perplexity"]["tokens"].get<int>(), 2 * 31);
  for (const char* k : {"mean_kld", "median_kld", "p99_kld", "top1_agreement", "rms_dp", "dp_percentiles", "ppl_base"})
    EXPECT_TRUE(j["kl"].contains(k)) << k;
  r = qtest::run(k3 + " perplexity -m " + q + " -f " + path("eval.txt") + " -c 32 --chunks 2 -q --kl-base " + path("cli.kl"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("made with -c 64"), std::string::npos) << r.out;
}

// An imatrix from the calibration text lowers the KL divergence on the held-out text.
TEST_F(Perplexity, ImatrixLowersKld) {
  const quant::PplOptions o = opts();
  save_base(o);
  auto m = model::Model::load(path("f32.gguf"));
  quant::ImatrixCollector col(*m);
  ThreadPool pool(2);
  model::RunOptions ro;
  ro.pool = &pool;
  ro.observer = &col;
  const std::vector<int32_t> t = tokens(*m, path("calib.txt"));
  for (int c = 0; c < 8; ++c) {
    model::State st = m->new_state(64);
    m->prefill(st, std::vector<int32_t>(t.begin() + 64 * c, t.begin() + 64 * (c + 1)), 64, ro, model::Logits::None, nullptr);
  }
  quant::Imatrix& im = col.imatrix();
  im.chunk_count = 8, im.chunk_size = 64, im.datasets = {"calib.txt"}, im.path = "calib.imatrix";
  im.check_model(m->file());
  for (const char* recipe : {"Q2_K", "Q3_K", "Q4_K"}) {
    const quant::KlStats a = kl_against_base(quantize(recipe), o);
    const quant::KlStats b = kl_against_base(quantize(recipe, &im), o);
    std::printf("%s mean KLD without imatrix %.5f, with %.5f\n", recipe, mean(a.kld), mean(b.kld));
    EXPECT_LT(mean(b.kld), mean(a.kld)) << recipe;
  }
}
