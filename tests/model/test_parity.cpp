// Parity with llama.cpp (node-llama-cpp 3.22.1 through tests/node/llama.mjs; flash attention off,
// F32 KV cache) on synthetic models written by write_synthetic (= k3 make-tiny). These tests FAIL
// when node or the harness is missing. Every test prints its measured numbers.
//
// Tolerances (model.md §9):
// * F32 weights, well-conditioned (RMS eps 0.5): 1e-3 (measured ~1e-6), and 32 greedy tokens equal.
// * F32 weights, default eps 1e-5: the random models amplify float-rounding differences 40-100x,
//   so the bound is max(1e-3, 4 x llama.cpp's own batch-vs-incremental spread) (measured: k3 ~1e-4,
//   spread ~6e-5), and 32 greedy tokens equal.
// * Quantized (F16/BF16/Q8_0/MXFP4 activation rounding): a one-ulp difference upstream can flip a
//   rounding, which the model amplifies; llama.cpp's own batch-vs-incremental spread measures this
//   on the same model and prompt (k3's own spread is measured too and the larger one counts).
//   Bound: 4 x that spread + 1e-3 (the floor covers the no-flip case, where k3 reproduces llama.cpp
//   to ~1e-6). Greedy tokens must agree on the well-conditioned models.
// * Flip-prone (default-eps F16 + MXFP4): flips happen between k3 and llama.cpp even where
//   llama.cpp's own spread is tiny. On CPUs with AMX llama.cpp multiplies most F16 weights against
//   unrounded activations in its own summation order (k3 follows it, kernels.h) and its
//   batch-vs-incremental spread is ~3e-5, while a one-ulp difference still flips the F16 rounding of
//   the weights outside that rule (ssm_beta, kv_a_mqa) or the Q8_0 rounding of the expert inputs:
//   measured on 5 prompts x 3 depths here, max|diff| 1e-2 ... 6 after such a flip, mean KL <= 5e-4,
//   while a systematic error (one tensor outside the F16 rule, the wrong rule) gives mean KL >= 1e-2.
//   So the bound there is on the distributions: mean KL(llama || k3) <= max(2e-3, 4 x llama.cpp's
//   own batch-vs-incremental mean KL; without AMX llama.cpp rounds every F16 activation and flips
//   between its own two runs) and >= 80 % equal argmax; the well-conditioned twin carries the tight
//   check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

struct Case {
  const char* name;
  model::SynthOptions (*make)(float);
  float eps;
  bool quantized;
  bool flip_prone;
  int n_prompt;
};

const Case kCases[] = {
    {"a_f32_wellcond", config_a, 0.5f, false, false, 40},
    {"a_f32_default_eps", config_a, 1e-5f, false, false, 40},
    {"b_noqlora_nolatent_softplus_wellcond", config_b, 0.5f, false, false, 24},
    {"b_noqlora_nolatent_softplus_default_eps", config_b, 1e-5f, false, false, 24},
    {"c_f16_mxfp4_wellcond", config_c, 0.5f, true, false, 24},
    {"c_f16_mxfp4_default_eps", config_c, 1e-5f, true, true, 24},
    {"d_q8_0_wellcond", config_d, 0.5f, true, false, 24},
    {"d_q8_0_default_eps", config_d, 1e-5f, true, false, 24},
};

class Parity : public ::testing::TestWithParam<Case> {};

TEST_P(Parity, LogitsAndGreedy) {
  const Case& c = GetParam();
  const std::string path = make_model(c.make(c.eps), c.name);
  auto m = model::Model::load(path);
  const auto ids = prompt_ids(c.n_prompt, m->n_vocab());

  const Rows lb = llama_logits(path, ids, "batch"), li = llama_logits(path, ids, "incremental");
  ASSERT_EQ(lb.n_vocab, m->n_vocab());
  const Rows kb = k3_logits(*m, ids, 0), ki = k3_logits(*m, ids, 1);
  const double spread = max_abs_diff(lb, li), k3_spread = max_abs_diff(kb, ki);
  const double d_batch = max_abs_diff(kb, lb), d_incr = max_abs_diff(ki, li);
  double tol = 1e-3;
  if (c.eps < 0.1f || c.quantized)
    tol = c.quantized ? 4 * std::max(spread, k3_spread) + 1e-3 : std::max(1e-3, 4 * spread);
  const Agreement ab = agreement(lb, kb), ai = agreement(li, ki);
  std::printf("[parity] %s: max|logit| %.3f, llama batch-vs-incremental %.3g (k3 %.3g), k3-vs-llama batch %.3g, "
              "incremental %.3g, tolerance %.3g; mean KL %.3g / %.3g, argmax equal %.0f%% / %.0f%%\n",
              c.name, max_abs(lb), spread, k3_spread, d_batch, d_incr, tol, ab.mean_kl, ai.mean_kl, 100 * ab.top1,
              100 * ai.top1);
  if (c.flip_prone) {
    const Agreement own = agreement(lb, li);
    const double kl_tol = std::max(2e-3, 4 * own.mean_kl);
    std::printf("[parity] %s: llama's own batch-vs-incremental mean KL %.3g, bound %.3g\n", c.name, own.mean_kl, kl_tol);
    EXPECT_LE(ab.mean_kl, kl_tol);
    EXPECT_LE(ai.mean_kl, kl_tol);
    EXPECT_GE(ab.top1, 0.8);
    EXPECT_GE(ai.top1, 0.8);
    return;
  }
  EXPECT_LE(d_batch, tol);
  EXPECT_LE(d_incr, tol);
  const auto lg = llama_generate(path, ids, 32);
  const auto kg = k3_generate(*m, ids, 32);
  EXPECT_EQ(kg, lg);
  std::set<int32_t> distinct(kg.begin(), kg.end());
  EXPECT_GE(distinct.size(), 4u) << "greedy output barely depends on anything: a degenerate model";
}

INSTANTIATE_TEST_SUITE_P(Configs, Parity, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Greedy output depends on the prompt (the synthetic initialisation keeps activations alive).
TEST(ParityModel, GreedyDependsOnPrompt) {
  const std::string path = make_model(config_a(0.5f), "a_f32_wellcond");
  auto m = model::Model::load(path);
  const auto g1 = k3_generate(*m, prompt_ids(8, m->n_vocab(), 1), 8);
  const auto g2 = k3_generate(*m, prompt_ids(8, m->n_vocab(), 2), 8);
  EXPECT_NE(g1, g2);
}

// A kimi-k3 file from an independent writer (tests/node/make_tiny_kimi_k3.mjs): k3 loads it and
// agrees with llama.cpp.
TEST(ParityModel, IndependentWriterModel) {
  const std::string h = llama_harness();
  const std::string path = temp_path("node_tiny_k3.gguf");
  std::string out;
  ASSERT_EQ(run_cmd("node " + h.substr(0, h.rfind('/')) + "/make_tiny_kimi_k3.mjs " + path, &out), 0) << out;
  auto m = model::Model::load(path);
  const auto ids = prompt_ids(20, m->n_vocab());
  const Rows lb = llama_logits(path, ids, "batch");
  const double d = max_abs_diff(k3_logits(*m, ids, 0), lb);
  std::printf("[parity] node-written tiny kimi-k3: k3-vs-llama %.3g\n", d);
  EXPECT_LE(d, 1e-3);
}

}  // namespace
