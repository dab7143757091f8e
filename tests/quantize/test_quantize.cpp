// k3 quantize end to end on a synthetic Kimi-K3: type plans (recipes, rules, keep-F32, fallbacks),
// outputs that k3 loads, split sets, the error report, and bad input (clear errors, no output).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "gguf/writer.h"
#include "helpers.h"
#include "model/model.h"
#include "quantize/quantizer.h"
#include "quantize/recipe.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"
#include "tensor/threadpool.h"

using namespace k3;
using qtest::TempDir;

namespace {

class Quantize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("k3q-quantize", TempDir::Base::Memory);
    model::write_synthetic(src(), qtest::synth_options());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string src() { return *dir_ / "src.gguf"; }
  static std::string path(const std::string& f) { return *dir_ / f; }
  static TempDir* dir_;

  static std::map<std::string, GgmlType> plan_types(const quant::Plan& p) {
    std::map<std::string, GgmlType> m;
    for (const auto& t : p.tensors) m[t.src->name] = t.type;
    return m;
  }
};
TempDir* Quantize::dir_ = nullptr;

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST_F(Quantize, KeepF32AndFallbacks) {
  const gguf::Model in = gguf::Model::open(src());
  const quant::Plan p = quant::make_plan(in, quant::recipe_by_name("q4_k"), {});
  std::map<std::string, const quant::TensorPlan*> by;
  for (const auto& t : p.tensors) by[t.src->name] = &t;
  for (const char* n : {"blk.0.attn_norm.weight", "blk.1.ffn_gate_inp.weight", "blk.1.exp_probs_b.bias",
                        "blk.0.ssm_conv1d_q.weight", "blk.0.ssm_a", "blk.0.ssm_dt.bias", "output_res_score.weight",
                        "blk.3.attn_kv_a_norm.weight", "blk.1.ffn_routed_norm.weight"}) {
    ASSERT_TRUE(by.count(n)) << n;
    EXPECT_EQ(by[n]->type, GgmlType::F32) << n;
    EXPECT_EQ(by[n]->cls, quant::TensorClass::KeepF32) << n;
  }
  EXPECT_EQ(by["blk.0.attn_q.weight"]->type, GgmlType::Q4_K);
  EXPECT_EQ(by["blk.1.ffn_up_exps.weight"]->type, GgmlType::Q4_K);
  EXPECT_EQ(by["blk.1.ffn_up_exps.weight"]->cls, quant::TensorClass::Experts);
  // ne0 = 64: Q4_K -> Q5_0 (quant-formats.md §9)
  EXPECT_EQ(by["blk.3.attn_k_b.weight"]->type, GgmlType::Q5_0);
  EXPECT_TRUE(contains(by["blk.3.attn_k_b.weight"]->why, "fallback q4_K -> q5_0"));
  EXPECT_EQ(by["blk.0.ssm_f_b.weight"]->type, GgmlType::Q5_0);
  EXPECT_EQ(p.file_type, 14u);

  const auto q2 = plan_types(quant::make_plan(in, quant::recipe_by_name("Q2_K"), {}));
  EXPECT_EQ(q2.at("blk.3.attn_k_b.weight"), GgmlType::Q4_0);
  const auto q6 = plan_types(quant::make_plan(in, quant::recipe_by_name("Q6_K"), {}));
  EXPECT_EQ(q6.at("blk.3.attn_k_b.weight"), GgmlType::Q8_0);
  const auto q5 = plan_types(quant::make_plan(in, quant::recipe_by_name("Q5_K"), {}));
  EXPECT_EQ(q5.at("blk.3.attn_k_b.weight"), GgmlType::Q5_1);
  const auto iq = plan_types(quant::make_plan(in, quant::recipe_by_name("IQ4_XS"), {}));
  EXPECT_EQ(iq.at("blk.3.attn_k_b.weight"), GgmlType::IQ4_NL);
}

TEST_F(Quantize, RecipesAndRules) {
  const gguf::Model in = gguf::Model::open(src());
  const quant::Plan k3 = quant::make_plan(in, quant::recipe_by_name("Q2_K_K3"), {});
  const auto t = plan_types(k3);
  EXPECT_EQ(t.at("blk.2.ffn_gate_exps.weight"), GgmlType::Q2_K);
  EXPECT_EQ(t.at("blk.2.ffn_down_exps.weight"), GgmlType::Q2_K);
  EXPECT_EQ(t.at("blk.2.ffn_up_shexp.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t.at("blk.0.attn_q.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t.at("token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t.at("blk.3.attn_k_b.weight"), GgmlType::BF16);
  EXPECT_EQ(t.at("blk.3.attn_v_b.weight"), GgmlType::BF16);
  EXPECT_EQ(k3.file_type, 10u);
  const auto mx = plan_types(quant::make_plan(in, quant::recipe_by_name("mxfp4_moe"), {}));
  EXPECT_EQ(mx.at("blk.2.ffn_gate_exps.weight"), GgmlType::MXFP4);
  EXPECT_EQ(mx.at("blk.0.attn_q.weight"), GgmlType::Q8_0);

  // first matching rule wins; user rules come before the recipe's
  const quant::Plan p = quant::make_plan(
      in, quant::recipe_by_name("Q4_K"),
      {quant::parse_rule("exps=q8_0"), quant::parse_rule("ffn_.*=q6_K"), quant::parse_rule("ffn_up_exps=q2_K"),
       quant::parse_rule("nothing_like_this=q4_0"), quant::parse_rule("attn_norm=q8_0"),
       quant::parse_rule("blk\\.[0-9]+\\.attn_(q|k)\\.weight=q5_k")});
  const auto r = plan_types(p);
  EXPECT_EQ(r.at("blk.1.ffn_up_exps.weight"), GgmlType::Q8_0);
  EXPECT_EQ(r.at("blk.1.ffn_up_shexp.weight"), GgmlType::Q6_K);
  EXPECT_EQ(r.at("blk.0.ffn_down.weight"), GgmlType::Q6_K);
  EXPECT_EQ(r.at("blk.0.attn_q.weight"), GgmlType::Q5_K);
  EXPECT_EQ(r.at("blk.0.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(r.at("blk.0.attn_norm.weight"), GgmlType::F32);
  ASSERT_EQ(p.warnings.size(), 3u);
  EXPECT_TRUE(contains(p.warnings[0], "ffn_up_exps=q2_K") && contains(p.warnings[0], "earlier rule")) << p.warnings[0];
  EXPECT_TRUE(contains(p.warnings[1], "matches no tensor")) << p.warnings[1];
  EXPECT_TRUE(contains(p.warnings[2], "kept in f32")) << p.warnings[2];

  EXPECT_THROW(quant::recipe_by_name("Q9_K"), Error);
  EXPECT_THROW(quant::parse_rule("exps=q9_0"), Error);
  EXPECT_THROW(quant::parse_rule("exps=q8_K"), Error);  // an activation format, no writer
  const auto iq = plan_types(quant::make_plan(in, quant::recipe_by_name("iq2_xxs"), {}));
  EXPECT_EQ(iq.at("blk.2.ffn_gate_exps.weight"), GgmlType::IQ2_XXS);
  EXPECT_EQ(iq.at("blk.0.attn_q.weight"), GgmlType::IQ2_XXS);
  EXPECT_EQ(iq.at("token_embd.weight"), GgmlType::Q2_K);  // no imatrix covers it
  EXPECT_EQ(iq.at("blk.3.attn_k_b.weight"), GgmlType::IQ4_NL);  // ne0 64: the fallback
  EXPECT_THROW(quant::parse_rule("(exps=q4_0"), Error);
  EXPECT_THROW(quant::parse_rule("exps"), Error);
}

// Every recipe writes a file that k3's loader accepts, with the planned types and file type (with an
// importance matrix, which the lattice types IQ2_XXS, IQ2_XS and IQ1_S need).
TEST_F(Quantize, EveryRecipeLoadsInK3) {
  const gguf::Model in = gguf::Model::open(src());
  const quant::Imatrix im = qtest::synthetic_imatrix(in);
  for (const auto& rec : quant::recipes()) {
    const quant::Plan p = quant::make_plan(in, rec, {});
    const std::string out = path("out-" + rec.name + ".gguf");
    quant::Options opt;
    opt.threads = 2;
    opt.recipe_name = rec.name;
    opt.imatrix = &im;
    const quant::Report rep = quant::quantize_model(in, p, out, opt);
    ASSERT_EQ(rep.tensors.size(), in.tensors().size());
    std::unique_ptr<model::Model> m;
    ASSERT_NO_THROW(m = model::Model::load(out)) << rec.name;
    EXPECT_EQ(m->meta().get_u32("general.file_type"), rec.file_type);
    EXPECT_EQ(m->meta().get_u32("general.quantization_version"), 2u);
    for (const auto& tp : p.tensors) EXPECT_EQ(m->file().get(tp.src->name).type, tp.type) << rec.name << " " << tp.src->name;
    for (const auto& tr : rep.tensors) {
      EXPECT_TRUE(std::isfinite(tr.err.rel_rmse())) << tr.name;
      if (tr.copied) {
        EXPECT_EQ(tr.err.d2, 0.0);
      }
    }
    std::filesystem::remove(out);
  }
}

// A quantized source (here Q8_0) is dequantized on the fly and quantized again; the output
// runs, and F32 sources of the same values give the same bytes.
TEST_F(Quantize, RequantizesAnySource) {
  const std::string q8 = path("q8.gguf"), q4 = path("q8-q4.gguf");
  {
    const gguf::Model in = gguf::Model::open(src());
    quant::quantize_model(in, quant::make_plan(in, quant::recipe_by_name("Q8_0"), {}), q8, {});
  }
  const gguf::Model in = gguf::Model::open(q8);
  const quant::Plan p = quant::make_plan(in, quant::recipe_by_name("Q4_K"), {});
  const quant::Report rep = quant::quantize_model(in, p, q4, {});
  auto m = model::Model::load(q4);
  ThreadPool pool(2);
  model::RunOptions ro;
  ro.pool = &pool;
  model::State st = m->new_state(16);
  std::vector<float> logits;
  m->prefill(st, {1, 2, 3, 4}, 4, ro, model::Logits::Last, &logits);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // The expert stack: Q8_0 -> float -> Q4_K equals quantizing the dequantized values directly.
  const gguf::TensorInfo& s = in.get("blk.1.ffn_gate_exps.weight");
  const gguf::TensorInfo& o = m->file().get("blk.1.ffn_gate_exps.weight");
  const int64_t ne0 = s.ne[0], rows = s.ne[1] * s.ne[2];
  std::vector<float> x(static_cast<size_t>(ne0 * rows));
  for (int64_t r = 0; r < rows; ++r) kernels(GgmlType::Q8_0).to_float(s.data + r * row_size(GgmlType::Q8_0, ne0), &x[r * ne0], ne0);
  std::vector<uint8_t> want(o.nbytes);
  ref::quantize_rows(GgmlType::Q4_K, x.data(), want.data(), rows, ne0, nullptr);
  EXPECT_EQ(0, std::memcmp(want.data(), o.data, o.nbytes));
}

TEST_F(Quantize, SplitOutputs) {
  const gguf::Model in = gguf::Model::open(src());
  const quant::Plan p = quant::make_plan(in, quant::recipe_by_name("Q4_K"), {});
  quant::Options opt;
  opt.split = quant::SplitMode::MaxSize;
  opt.split_max_bytes = 1 << 20;
  const std::vector<std::string> parts = quant::output_paths(in, p, path("split.gguf"), opt);
  ASSERT_GT(parts.size(), 2u);
  EXPECT_EQ(parts[0], path("split-00001-of-0000" + std::to_string(parts.size()) + ".gguf"));
  quant::quantize_model(in, p, path("split.gguf"), opt);
  for (const auto& f : parts) EXPECT_TRUE(std::filesystem::exists(f)) << f;
  {
    auto m = model::Model::load(parts[0]);
    EXPECT_EQ(m->file().tensors().size(), in.tensors().size());
    EXPECT_EQ(m->file().files().size(), parts.size());
  }
  // --keep-split: the parts of a split input
  const gguf::Model split_in = gguf::Model::open(parts[0]);
  const quant::Plan p2 = quant::make_plan(split_in, quant::recipe_by_name("Q8_0"), {});
  quant::Options keep;
  keep.split = quant::SplitMode::Keep;
  quant::quantize_model(split_in, p2, path("kept.gguf"), keep);
  const std::vector<std::string> kept = quant::output_paths(split_in, p2, path("kept.gguf"), keep);
  ASSERT_EQ(kept.size(), parts.size());
  auto m = model::Model::load(kept[0]);
  for (size_t i = 0; i < parts.size(); ++i)
    EXPECT_EQ(m->file().files()[i]->tensors().size(), split_in.files()[i]->tensors().size());
}

TEST_F(Quantize, CliReportAndDryRun) {
  const std::string k3 = qtest::k3_bin();
  const std::string out = path("cli.gguf"), rep = path("cli.json");
  auto r = qtest::run(k3 + " quantize " + src() + " " + out + " Q2_K_K3 --dry-run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "blk.1.ffn_up_exps.weight")) << r.out;
  EXPECT_TRUE(contains(r.out, "-> q2_K")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = qtest::run(k3 + " quantize " + src() + " " + out + " Q4_K -t 2 -q --report " + rep +
                 " --tensor-type exps=q2_K --tensor-type no_such_tensor=q8_0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "warning: --tensor-type 'no_such_tensor=q8_0' matches no tensor")) << r.out;
  EXPECT_TRUE(contains(r.out, "experts")) << r.out;
  std::ifstream f(rep);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["tensors"].size(), gguf::Model::open(src()).tensors().size());
  const auto& ex = j["classes"]["experts"];
  EXPECT_NEAR(ex["bpw"].get<double>(), 2.625, 1e-9);
  EXPECT_GT(ex["rel_rmse"].get<double>(), j["classes"]["attention"]["rel_rmse"].get<double>());
  EXPECT_GT(ex["cosine"].get<double>(), 0.9);
  EXPECT_EQ(j["classes"]["f32_kept"]["rel_rmse"].get<double>(), 0.0);
  for (const char* k : {"bpw", "rel_rmse", "cosine", "max_abs_err", "class", "type"})
    EXPECT_TRUE(j["tensors"][0].contains(k)) << k;
}

TEST_F(Quantize, BadInputLeavesNoOutput) {
  const std::string k3 = qtest::k3_bin();
  const std::string out = path("bad.gguf");
  auto r = qtest::run(k3 + " quantize " + src() + " " + out + " Q9_K");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "unknown quantization type 'Q9_K'")) << r.out;
  r = qtest::run(k3 + " quantize " + src() + " " + out + " Q4_K --tensor-type exps=banana");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "unknown or unwritable type 'banana'")) << r.out;

  // a source missing a tensor
  const std::string holey = path("holey.gguf");
  {
    const gguf::Model in = gguf::Model::open(src());
    std::vector<gguf::TensorSpec> specs;
    for (const auto* t : in.tensors())
      if (t->name != "blk.2.ffn_down_exps.weight") specs.push_back({t->name, t->type, std::vector<int64_t>(t->ne, t->ne + t->n_dims)});
    gguf::Writer w(holey, in.meta(), specs);
    for (const auto* t : in.tensors())
      if (t->name != "blk.2.ffn_down_exps.weight") w.write(t->data, t->nbytes);
    w.finish();
  }
  r = qtest::run(k3 + " quantize " + holey + " " + out + " Q4_K");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "missing tensor 'blk.2.ffn_down_exps.weight'")) << r.out;

  // an imatrix of another model
  const std::string other = path("other.gguf"), im = path("other.imatrix");
  {
    model::SynthOptions o = qtest::synth_options();
    o.n_embd = 512;
    model::write_synthetic(other, o);
    const gguf::Model om = gguf::Model::open(other);
    quant::Imatrix m;
    m.datasets = {"x"};
    m.chunk_count = 1, m.chunk_size = 8;
    const gguf::TensorInfo& t = om.get("blk.0.attn_q.weight");
    m.entries["blk.0.attn_q.weight"] = {t.ne[0], 1, std::vector<double>(t.ne[0], 1.0), {8.0}};
    m.save(im);
  }
  r = qtest::run(k3 + " quantize " + src() + " " + out + " Q4_K --imatrix " + im);
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "computed for another model")) << r.out;
  r = qtest::run(k3 + " quantize " + src() + " " + out + " Q4_K --imatrix " + holey);
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "not an imatrix")) << r.out;
  r = qtest::run(k3 + " quantize " + path("does-not-exist.gguf") + " " + out + " Q4_K");
  EXPECT_NE(r.status, 0);

  // a type ggml writes only with an importance matrix: none, or one without an entry for a tensor
  r = qtest::run(k3 + " quantize " + src() + " " + out + " Q4_K --tensor-type exps=iq2_xxs");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "_exps.weight': iq2_xxs needs an importance matrix") && contains(r.out, "k3 imatrix"))
      << r.out;
  const std::string partial = path("partial.imatrix");
  {
    const gguf::Model in = gguf::Model::open(src());
    quant::Imatrix m = qtest::synthetic_imatrix(in);
    m.entries.erase("blk.0.attn_q.weight");
    m.save(partial);
  }
  r = qtest::run(k3 + " quantize " + src() + " " + out + " Q4_K --tensor-type 'blk\\.0\\.attn_q\\.=iq1_s' --imatrix " + partial);
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "tensor 'blk.0.attn_q.weight': iq1_s needs an importance matrix") &&
              contains(r.out, "has no entry for it"))
      << r.out;

  EXPECT_FALSE(std::filesystem::exists(out));
  for (const auto& e : std::filesystem::directory_iterator(dir_->path()))
    EXPECT_FALSE(contains(e.path().string(), ".tmp") || contains(e.path().string(), ".part")) << e.path();
}
