// make-tiny's generator -> GGUF (reference) and the same weights as a Hugging Face checkpoint ->
// k3 convert -> every converted tensor byte-identical to the reference, in several layouts and
// weight types; the metadata the model reads agrees; the split set loads; the manifest verifies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "convert/manifest.h"
#include "gguf/gguf.h"
#include "helpers.h"
#include "model/hparams.h"
#include "model/registry.h"
#include "tensor/fp16.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {

void expect_same_model_keys(const std::string& ref, const std::string& first) {
  gguf::Model a = gguf::Model::open(ref), b = gguf::Model::open(first);
  size_t compared = 0;
  for (const auto& kv : a.meta().kvs()) {
    const bool model_key = kv.key.rfind("kimi-k3.", 0) == 0 || kv.key.rfind("tokenizer.", 0) == 0 ||
                           kv.key == "general.architecture";
    if (!model_key) continue;
    const gguf::Value* v = b.meta().find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->type, kv.value.type) << kv.key;
    EXPECT_EQ(v->to_string(1u << 30), kv.value.to_string(1u << 30)) << kv.key;
    ++compared;
  }
  EXPECT_GT(compared, 30u);
}

convert::ConvertResult convert_and_check(const test::Checkpoint& c, const std::string& out, int jobs,
                                         const model::SynthOptions& o) {
  auto opt = test::convert_options(c.hf, out, jobs);
  convert::ConvertResult r = convert::run_convert(opt);
  const std::string first = test::first_part(out);
  EXPECT_NE(first, "");
  EXPECT_EQ(test::compare_tensors(c.gguf, first), "");
  // The set is a valid K3 model: the loader binds every tensor by the registry.
  gguf::Model m = gguf::Model::open(first);
  model::HParams hp = model::HParams::from_metadata(m.meta());
  EXPECT_NO_THROW(model::bind_weights(m, hp));
  // One part per source shard with text tensors: layers, then the globals; the vision shard has none.
  EXPECT_EQ(static_cast<uint32_t>(m.files().size()), o.n_layer + 1);
  EXPECT_EQ(m.meta().get_i32("split.tensors.count"), static_cast<int32_t>(model::tensor_count(hp)));
  for (size_t i = 1; i < m.files().size(); ++i) EXPECT_EQ(m.files()[i]->meta().kvs().size(), 3u);  // split keys only
  // Manifest: every tensor, and verify agrees.
  convert::Manifest man = convert::Manifest::load(out + "/MANIFEST.json");
  EXPECT_EQ(man.tensors.size(), model::tensor_count(hp));
  std::vector<std::string> files;
  for (const auto& f : m.files()) files.push_back(f->path());
  convert::VerifyReport rep = convert::verify_files(man, files, 2);
  EXPECT_TRUE(rep.ok()) << (rep.problems.empty() ? "" : rep.problems[0]);
  EXPECT_EQ(rep.tensors_ok, man.tensors.size());
  return r;
}

}  // namespace

TEST(ConvertRoundTrip, Bf16WithMxfp4Experts) {
  test::TempDir d;
  auto o = test::tiny_options(GgmlType::BF16, GgmlType::MXFP4);
  auto c = test::make_checkpoint(d.path(), o);
  auto r = convert_and_check(c, d / "out", 2, o);
  EXPECT_EQ(r.parts_written, static_cast<int>(o.n_layer + 1));
  expect_same_model_keys(c.gguf, test::first_part(d / "out"));
  gguf::Model m = gguf::Model::open(test::first_part(d / "out"));
  EXPECT_EQ(m.meta().get_u32("general.file_type"), 38u);
  EXPECT_EQ(m.get("blk.1.ffn_gate_exps.weight").type, GgmlType::MXFP4);
  EXPECT_EQ(m.get("blk.0.attn_norm.weight").type, GgmlType::F32);
}

TEST(ConvertRoundTrip, ScatteredShardsU8ScalesAnd2dConv) {
  // AttnRes pairs and expert stacks spanning two shards, U8 scales, [D, K] conv weights.
  test::TempDir d;
  auto o = test::tiny_options(GgmlType::BF16, GgmlType::MXFP4);
  convert::HfLayout lay;
  lay.scatter = true;
  lay.conv_2d = true;
  lay.scale_e8m0 = false;
  auto c = test::make_checkpoint(d.path(), o, lay);
  convert_and_check(c, d / "out", 1, o);
}

TEST(ConvertRoundTrip, F32AndF16Models) {
  for (auto [t, et] : {std::pair{GgmlType::F32, GgmlType::F32}, std::pair{GgmlType::F16, GgmlType::F16}}) {
    test::TempDir d;
    auto o = test::tiny_options(t, et);
    o.no_q_lora = true;  // the other MLA form (plain attn_q)
    auto c = test::make_checkpoint(d.path(), o);
    convert_and_check(c, d / "out", 2, o);
  }
}

TEST(ConvertRoundTrip, OuttypeBf16RoundsF32Weights) {
  test::TempDir d;
  auto o = test::tiny_options(GgmlType::F32, GgmlType::F32);
  auto c = test::make_checkpoint(d.path(), o);
  auto opt = test::convert_options(c.hf, d / "out", 2);
  opt.plan.outtype = convert::OutType::BF16;
  convert::run_convert(opt);
  gguf::Model ref = gguf::Model::open(c.gguf), out = gguf::Model::open(test::first_part(d / "out"));
  for (const char* n : {"token_embd.weight", "blk.3.attn_k_b.weight", "blk.1.ffn_down_exps.weight"}) {
    const gguf::TensorInfo& a = ref.get(n);
    const gguf::TensorInfo& b = out.get(n);
    ASSERT_EQ(b.type, GgmlType::BF16) << n;
    const float* x = reinterpret_cast<const float*>(a.data);
    const uint16_t* y = reinterpret_cast<const uint16_t*>(b.data);
    for (int64_t i = 0; i < a.nelements(); ++i) ASSERT_EQ(y[i], fp32_to_bf16(x[i])) << n << " " << i;
  }
  EXPECT_EQ(out.get("blk.0.attn_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(out.meta().get_u32("general.file_type"), 32u);
}

TEST(ConvertRoundTrip, ChatTemplateAndEos) {
  test::TempDir d;
  auto o = test::tiny_options();
  auto c = test::make_checkpoint(d.path(), o);
  const std::string tpl = d / "t.jinja";
  { std::ofstream(tpl) << "{{ messages }}"; }
  auto opt = test::convert_options(c.hf, d / "out");
  opt.plan.chat_template_file = tpl;
  convert::run_convert(opt);
  gguf::Model ref = gguf::Model::open(c.gguf), m = gguf::Model::open(test::first_part(d / "out"));
  EXPECT_EQ(m.meta().get_str("tokenizer.chat_template"), "{{ messages }}");
  EXPECT_EQ(m.meta().get_u32("tokenizer.ggml.eos_token_id"), ref.meta().get_u32("tokenizer.ggml.eos_token_id"));
}
