// Input rows in place of token embeddings (model/input_rows.h, how images reach the model): rows
// equal to the tokens' own embeddings give the plain forward's bits; other rows change the result
// only from their positions on, and give the same bits however the prompt is cut into chunks or
// batched with another sequence.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "helpers.h"
#include "tensor/kernels.h"
#include "tensor/threadpool.h"

namespace k3 {
namespace {

struct Fixture {
  std::unique_ptr<model::Model> m;
  std::vector<int32_t> ids;
  int64_t H = 0;
  Fixture() {
    model::SynthOptions o = model::synth_preset("tiny");
    m = model::Model::load(test::make_model(o, "input-rows.gguf"));
    H = m->hparams().n_embd;
    for (int i = 0; i < 23; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 5) % 500));
  }
  std::vector<float> logits(const std::vector<int32_t>& p, int64_t n_batch, std::span<const model::InputRows> rows) {
    ThreadPool pool(2);
    model::RunOptions opt{&pool};
    model::State st = m->new_state(256);
    std::vector<float> out;
    m->prefill(st, p, n_batch, opt, model::Logits::All, &out, rows);
    return out;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(InputRows, TokenEmbeddingsAsRowsAreThePlainForward) {
  Fixture f;
  const model::Tensor& emb = f.m->weights().token_embd;
  std::vector<float> rows(6 * f.H);
  for (int r = 0; r < 6; ++r)
    kernels(emb.type).to_float(emb.data + f.ids[8 + r] * emb.row_bytes(), rows.data() + r * f.H, f.H);
  const model::InputRows in{8, 6, rows.data()};
  EXPECT_TRUE(same_bits(f.logits(f.ids, 64, {}), f.logits(f.ids, 64, std::span(&in, 1))));
}

TEST(InputRows, RowsChangeLaterPositionsOnlyAndAreChunkIndependent) {
  Fixture f;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> a(5 * f.H), b(4 * f.H);
  for (float& v : a) v = nd(rng);
  for (float& v : b) v = nd(rng);
  const model::InputRows in[2] = {{4, 5, a.data()}, {15, 4, b.data()}};
  const std::vector<float> plain = f.logits(f.ids, 64, {}), whole = f.logits(f.ids, 64, in);
  const int64_t V = f.m->n_vocab();
  EXPECT_EQ(std::memcmp(plain.data(), whole.data(), 4 * V * sizeof(float)), 0);  // before the first row
  EXPECT_NE(std::memcmp(plain.data() + 4 * V, whole.data() + 4 * V, V * sizeof(float)), 0);
  for (int64_t n_batch : {1, 3, 7, 16}) EXPECT_TRUE(same_bits(whole, f.logits(f.ids, n_batch, in))) << n_batch;

  // In a batch beside a plain sequence: the same bits for both.
  ThreadPool pool(2);
  model::RunOptions opt{&pool};
  model::State s1 = f.m->new_state(256), s2 = f.m->new_state(256);
  std::vector<float> l1, l2;
  const model::Segment batch[2] = {{&s1, f.ids.data(), 23, model::Logits::All, &l1, in},
                                   {&s2, f.ids.data(), 23, model::Logits::All, &l2, {}}};
  f.m->forward(batch, opt);
  EXPECT_TRUE(same_bits(l1, whole));
  EXPECT_TRUE(same_bits(l2, plain));
}

}  // namespace
}  // namespace k3
