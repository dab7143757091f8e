// Importance matrices: the llama.cpp imatrix GGUF layout, model checks, collection by weight
// address, per-expert use in k3 quantize, and the error the weighting is meant to lower.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/error.h"
#include "helpers.h"
#include "model/expert_store.h"
#include "model/model.h"
#include "quantize/fast_kquants.h"
#include "quantize/imatrix.h"
#include "quantize/quantizer.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"

using namespace k3;

namespace {

quant::Imatrix sample_imatrix() {
  quant::Imatrix im;
  im.datasets = {"calib.txt"};
  im.chunk_count = 3;
  im.chunk_size = 64;
  im.entries["blk.0.attn_q.weight"] = {4, 1, {1, 2, 3, 4}, {2}};
  im.entries["blk.1.ffn_up_exps.weight"] = {2, 3, {1, 1, 4, 8, 0, 0}, {1, 2, 0}};
  return im;
}

}  // namespace

TEST(Imatrix, FileIsLlamaCppLayout) {
  qtest::TempDir dir("k3q-imatrix", qtest::TempDir::Base::Memory);
  const quant::Imatrix im = sample_imatrix();
  im.save(dir / "a.gguf");
  const auto f = gguf::File::open(dir / "a.gguf");
  EXPECT_EQ(f->meta().get_str("general.type"), "imatrix");
  EXPECT_EQ(f->meta().get_u32("imatrix.chunk_count"), 3u);
  EXPECT_EQ(f->meta().get_u32("imatrix.chunk_size"), 64u);
  EXPECT_EQ(f->meta().get_array("imatrix.datasets").elem, gguf::ValueType::STRING);
  std::map<std::string, const gguf::TensorInfo*> t;
  for (const auto& ti : f->tensors()) t[ti.name] = &ti;
  ASSERT_EQ(t.size(), 4u);
  const gguf::TensorInfo* s = t.at("blk.1.ffn_up_exps.weight.in_sum2");
  const gguf::TensorInfo* c = t.at("blk.1.ffn_up_exps.weight.counts");
  EXPECT_EQ(s->type, GgmlType::F32);
  EXPECT_EQ(s->ne[0], 2);
  EXPECT_EQ(s->ne[1], 3);
  EXPECT_EQ(c->ne[0], 1);
  EXPECT_EQ(c->ne[1], 3);
  EXPECT_EQ(reinterpret_cast<const float*>(s->data)[3], 8.f);

  const quant::Imatrix back = quant::Imatrix::load(dir / "a.gguf");
  EXPECT_EQ(back.datasets, im.datasets);
  EXPECT_EQ(back.entries.size(), 2u);
  const quant::ImatrixEntry& e = back.entries.at("blk.1.ffn_up_exps.weight");
  // importance = sum / count; a matrix that saw no rows gets 1 (llama-quantize's rule)
  EXPECT_EQ(quant::Imatrix::values(e, 0), (std::vector<float>{1, 1}));
  EXPECT_EQ(quant::Imatrix::values(e, 1), (std::vector<float>{2, 4}));
  EXPECT_EQ(quant::Imatrix::values(e, 2), (std::vector<float>{1, 1}));
  EXPECT_EQ(quant::Imatrix::values(back.entries.at("blk.0.attn_q.weight"), 0), (std::vector<float>{0.5, 1, 1.5, 2}));

  quant::Imatrix sum = back;
  sum.merge(back);
  EXPECT_EQ(sum.chunk_count, 6u);
  EXPECT_EQ(sum.entries.at("blk.0.attn_q.weight").sums[3], 8.0);
}

// k3 imatrix covers every matrix product of a forward pass, the LM head's included (as
// llama-imatrix's files do): the lattice types that need an importance matrix can then quantize
// output.weight too.
TEST(Imatrix, CliCoversEveryProductWithTheLmHead) {
  qtest::TempDir dir("k3q-imcli", qtest::TempDir::Base::Memory);
  model::write_synthetic(dir / "m.gguf", qtest::synth_options());
  qtest::write_file(dir / "calib.txt", qtest::make_text(4, 300));
  const qtest::RunResult r = qtest::run(qtest::k3_bin() + " imatrix -m " + (dir / "m.gguf") + " -f " + (dir / "calib.txt") +
                                        " -c 32 --chunks 2 -t 2 -o " + (dir / "im.gguf"));
  ASSERT_EQ(r.status, 0) << r.out;
  const quant::Imatrix im = quant::Imatrix::load(dir / "im.gguf");
  const quant::ImatrixEntry* head = im.find("output.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->counts[0], 64.0);  // every token of both chunks
  EXPECT_NE(im.find("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(im.find("token_embd.weight"), nullptr);  // looked up, not multiplied
}

TEST(Imatrix, CollectorMapsWeightAddresses) {
  qtest::TempDir dir("k3q-collect", qtest::TempDir::Base::Memory);
  model::write_synthetic(dir / "m.gguf", qtest::synth_options());
  const auto mm = model::Model::load(dir / "m.gguf");
  const gguf::Model& m = mm->file();
  quant::ImatrixCollector col(*mm);
  const gguf::TensorInfo& up = m.get("blk.1.ffn_up_exps.weight");
  const gguf::TensorInfo& q = m.get("blk.0.attn_q.weight");
  const int64_t ne0 = up.ne[0];
  std::vector<float> x(static_cast<size_t>(3 * ne0));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.f;
  const size_t mat = up.nbytes / static_cast<size_t>(up.ne[2]);
  col.observe(up.data + 5 * mat, x.data(), 3);  // expert 5
  col.observe(up.data + 5 * mat, x.data(), 2);
  col.observe(q.data, x.data(), 1);
  col.observe(x.data(), x.data(), 1);  // not a weight: ignored
  const quant::Imatrix& im = col.imatrix();
  ASSERT_EQ(im.entries.size(), 2u);
  const quant::ImatrixEntry& e = im.entries.at("blk.1.ffn_up_exps.weight");
  EXPECT_EQ(e.n_mat, up.ne[2]);
  EXPECT_EQ(e.counts[5], 5.0);
  EXPECT_EQ(e.counts[4], 0.0);
  double want = 0;
  for (int t = 0; t < 3; ++t) want += x[t * ne0] * x[t * ne0] * (t < 2 ? 2.0 : 1.0);
  EXPECT_EQ(e.sums[5 * ne0 + 0], want);
  EXPECT_EQ(im.entries.at("blk.0.attn_q.weight").counts[0], 1.0);
  EXPECT_NO_THROW(im.check_model(m));

  quant::Imatrix bad = im;
  bad.entries["blk.9.attn_q.weight"] = bad.entries.at("blk.0.attn_q.weight");
  try {
    bad.check_model(m);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("computed for another model"), std::string::npos) << err.what();
  }
  quant::Imatrix bad2 = im;
  bad2.entries.at("blk.1.ffn_up_exps.weight").n_mat = 4;
  EXPECT_THROW(bad2.check_model(m), Error);
}

// The experts' statistics do not depend on where the products read them: the mapped stacks, the
// same repacked in memory (Model::repack_weights) or an expert cache (the store serves its own
// copies; the model reports its matrices). Prefill (experts grouped) and decode (one token).
TEST(Imatrix, SameFromMappedRepackedAndStreamedExperts) {
  qtest::TempDir dir("k3q-collect-src", qtest::TempDir::Base::Memory);
  model::write_synthetic(dir / "m.gguf", qtest::synth_options(GgmlType::F32));
  auto collect = [&](bool repack, bool stream) {
    auto m = model::Model::load(dir / "m.gguf");
    if (repack) {
      EXPECT_GT(m->repack_weights(), 0u);
    }
    std::unique_ptr<model::ExpertStore> store;
    if (stream) {
      model::ExpertStoreOptions so;
      so.quiet = true, so.budget_bytes = 1;
      store = std::make_unique<model::ExpertStore>(*m, so);
    }
    quant::ImatrixCollector col(*m);
    ThreadPool pool(2);
    model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
    opt.observer = &col;
    opt.experts = store.get();
    model::State st = m->new_state(32);
    std::vector<int32_t> ids = {5, 17, 300, 42, 7, 99, 123, 4};
    m->prefill(st, ids, 8, opt, model::Logits::None, nullptr);
    for (int32_t id : {8, 9, 10}) m->forward(st, &id, 1, opt, model::Logits::None, nullptr);
    return col.imatrix();
  };
  const quant::Imatrix mapped = collect(false, false);
  const quant::ImatrixEntry& up = mapped.entries.at("blk.1.ffn_up_exps.weight");
  double seen = 0;
  for (double c : up.counts) seen += c;
  EXPECT_EQ(seen, 11.0 * 2) << "every token reaches n_expert_used experts";
  for (const quant::Imatrix& other : {collect(true, false), collect(false, true)}) {
    ASSERT_EQ(other.entries.size(), mapped.entries.size());
    for (const auto& [name, e] : mapped.entries) {
      const quant::ImatrixEntry& o = other.entries.at(name);
      EXPECT_EQ(o.sums, e.sums) << name;
      EXPECT_EQ(o.counts, e.counts) << name;
    }
  }
}

// k3 quantize --imatrix gives each expert its own importance row: the bytes equal the reference
// quantizer called per expert with that expert's values.
TEST(Imatrix, QuantizeUsesPerExpertValues) {
  qtest::TempDir dir("k3q-perexpert", qtest::TempDir::Base::Memory);
  model::write_synthetic(dir / "m.gguf", qtest::synth_options());
  const gguf::Model in = gguf::Model::open(dir / "m.gguf");
  const std::string name = "blk.2.ffn_down_exps.weight";
  const gguf::TensorInfo& t = in.get(name);
  const int64_t ne0 = t.ne[0], ne1 = t.ne[1], E = t.ne[2];
  quant::Imatrix im;
  im.datasets = {"synthetic"};
  im.chunk_count = 1, im.chunk_size = 1;
  quant::ImatrixEntry e{ne0, E, std::vector<double>(static_cast<size_t>(ne0 * E)), std::vector<double>(static_cast<size_t>(E), 10.0)};
  std::mt19937 g(3);
  std::exponential_distribution<double> ed(1.0);
  for (auto& v : e.sums) v = 10.0 * ed(g);
  e.counts[1] = 0;  // an expert no token reached
  im.entries[name] = e;
  im.path = "synthetic.imatrix";
  im.check_model(in);
  quant::Options opt;
  opt.imatrix = &im;
  opt.threads = 2;
  const quant::Plan plan = quant::make_plan(in, quant::recipe_by_name("Q2_K_K3"), {});
  const quant::Report rep = quant::quantize_model(in, plan, dir / "out.gguf", opt);
  const gguf::Model out = gguf::Model::open(dir / "out.gguf");
  EXPECT_EQ(out.meta().get_str("quantize.imatrix.file"), "synthetic.imatrix");
  EXPECT_EQ(out.meta().get_i32("quantize.imatrix.entries_count"), 1);
  const gguf::TensorInfo& o = out.get(name);
  ASSERT_EQ(o.type, GgmlType::Q2_K);
  const size_t in_mat = t.nbytes / E, out_mat = o.nbytes / E;
  std::vector<float> x(static_cast<size_t>(ne0 * ne1));
  std::vector<uint8_t> want(out_mat);
  for (int64_t ex = 0; ex < E; ++ex) {
    for (int64_t r = 0; r < ne1; ++r)
      kernels(t.type).to_float(t.data + ex * in_mat + r * row_size(t.type, ne0), &x[r * ne0], ne0);
    const std::vector<float> qw = quant::Imatrix::values(e, ex);
    ref::quantize_rows(GgmlType::Q2_K, x.data(), want.data(), ne1, ne0, qw.data());
    EXPECT_EQ(0, std::memcmp(want.data(), o.data + ex * out_mat, out_mat)) << "expert " << ex;
  }
  for (const auto& tr : rep.tensors) {
    if (tr.name == name) {
      EXPECT_TRUE(tr.weighted);
    }
  }
}

// What the weighting buys: with activations whose columns differ in scale, the importance-weighted
// error sum_c imp_c (w - q(w))^2 and the error of the product W x both drop for every type with
// a weighted search, on MXFP4-sourced weights.
TEST(Imatrix, WeightedErrorDrops) {
  const int64_t ne0 = 512, rows = 128, T = 64;
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::lognormal_distribution<float> col_scale(0.f, 1.0f);
  std::vector<float> w(static_cast<size_t>(ne0 * rows)), wq(w.size());
  for (auto& v : w) v = 0.02f * nd(g);
  std::vector<uint8_t> mx(row_size(GgmlType::MXFP4, ne0) * rows);
  ref::quantize_rows(GgmlType::MXFP4, w.data(), mx.data(), rows, ne0, nullptr);
  ref::dequantize_row(GgmlType::MXFP4, mx.data(), w.data(), ne0 * rows);
  std::vector<float> s(ne0), x(static_cast<size_t>(T * ne0)), imp(ne0, 0.f);
  for (auto& v : s) v = col_scale(g);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < ne0; ++c) {
      x[t * ne0 + c] = s[c] * nd(g);
      imp[c] += x[t * ne0 + c] * x[t * ne0 + c] / T;
    }
  auto errors = [&](GgmlType type, const float* qw, double& werr, double& yerr) {
    std::vector<uint8_t> q(row_size(type, ne0) * rows);
    quant::quantize_rows(type, w.data(), q.data(), rows, ne0, qw);
    for (int64_t r = 0; r < rows; ++r) kernels(type).to_float(q.data() + r * row_size(type, ne0), &wq[r * ne0], ne0);
    werr = yerr = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ne0; ++c) {
        const double d = wq[r * ne0 + c] - w[r * ne0 + c];
        werr += imp[c] * d * d;
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double y = 0;
        for (int64_t c = 0; c < ne0; ++c) y += (wq[r * ne0 + c] - w[r * ne0 + c]) * x[t * ne0 + c];
        yerr += y * y;
      }
  };
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q4_0,
                        GgmlType::Q5_1, GgmlType::IQ4_XS}) {
    double w0, y0, w1, y1;
    errors(type, nullptr, w0, y0);
    errors(type, imp.data(), w1, y1);
    std::printf("%-7s weighted error %.4g -> %.4g (%.1f%%), output error %.4g -> %.4g\n", type_name(type), w0, w1,
                100 * (w1 / w0 - 1), y0, y1);
    EXPECT_LT(w1, w0) << type_name(type);
    EXPECT_LT(y1, y0) << type_name(type);
  }
}
