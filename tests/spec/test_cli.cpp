// The commands with speculative decoding: `k3 run --json` with n-gram drafts and with a DSpark
// draft prints plain decoding's ids on F32, F16 + MXFP4, Q8_0 + MXFP4 and K-quant files, with
// streamed experts and across a --prompt-cache reuse, and reports draft_tokens / draft_accepted;
// bad flag combinations are refused with a message; k3 bench measures the verify curve and a
// scripted decode.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "spec_helpers.h"

using namespace k3;
using namespace k3::test;
using nlohmann::json;

namespace {

json run_json(const std::string& cmd) {
  std::string out;
  EXPECT_EQ(run_cmd(cmd, &out, false), 0) << cmd << "\n" << out;
  try {
    return json::parse(out);
  } catch (const std::exception&) {
    ADD_FAILURE() << cmd << ": " << out.substr(0, 300);
    return json::object();
  }
}

struct File {
  const char* name;
  model::SynthOptions (*make)();
};
model::SynthOptions tiny(GgmlType t, GgmlType e) {
  model::SynthOptions o = model::synth_preset("tiny");
  o.type = t, o.expert_type = e, o.seed = 51;
  return o;
}
model::SynthOptions small_q4k() {
  model::SynthOptions o = model::synth_preset("small");
  o.n_layer = 5, o.type = GgmlType::Q4_K, o.expert_type = GgmlType::Q4_K, o.seed = 52;
  return o;
}
const File kFiles[] = {{"f32", [] { return tiny(GgmlType::F32, GgmlType::F32); }},
                       {"f16_mxfp4", [] { return tiny(GgmlType::F16, GgmlType::MXFP4); }},
                       {"q8_0_mxfp4", [] { return tiny(GgmlType::Q8_0, GgmlType::MXFP4); }},
                       {"q4_k", small_q4k}};

class RunSpec : public ::testing::TestWithParam<File> {};

TEST_P(RunSpec, IdsEqualPlain) {
  const std::string path = make_model(GetParam().make(), std::string("cli_") + GetParam().name);
  auto m = model::Model::load(path);
  const uint32_t L = m->hparams().n_layer;
  const std::string draft = make_draft(*m, std::string("cli_draft_") + GetParam().name,
                                       "--taps 1," + std::to_string(L - 2) + " --seed 9");
  ASSERT_FALSE(draft.empty());
  const std::string base = k3_bin() + " run -m " + path + " -t 2 --temp 0 --ignore-eos -n 48 --json -p " +
                           "'The cat sat on the mat. The cat sat on the mat. The cat'";
  const json plain = run_json(base);
  ASSERT_EQ(plain["ids"].size(), 48u);
  EXPECT_FALSE(plain.contains("draft_tokens"));
  // Streamed experts leave every matrix in the file's layout (docs/model.md, "Repacking"), whose
  // order differs from Q4_K_LANES' by rounding: the streamed runs equal plain decoding streamed.
  const std::string streamed = " --expert-cache 1M";
  const json plain_streamed = run_json(base + streamed);
  ASSERT_EQ(plain_streamed["ids"].size(), 48u);
  const std::string cache = temp_path(std::string("cli_cache_") + GetParam().name + ".k3cache");
  std::remove(cache.c_str());
  const std::pair<std::string, std::string> variants[] = {
      {"ngram", " --spec-type ngram"},
      {"ngram draft-max 4", " --spec-type ngram --draft-max 4"},
      {"dspark", " -md " + draft},
      {"dspark draft-max 2, draft-min 2", " -md " + draft + " --draft-max 2 --draft-min 2"},
      {"dspark, streamed experts", " -md " + draft + streamed},
      {"ngram, streamed experts", " --spec-type ngram" + streamed},
      {"dspark, prompt cache saved", " -md " + draft + " --prompt-cache " + cache},
      {"dspark, prompt cache reused", " -md " + draft + " --prompt-cache " + cache},
  };
  for (const auto& [what, flags] : variants) {
    const json j = run_json(base + flags);
    EXPECT_EQ(j["ids"], (flags.find(streamed) != std::string::npos ? plain_streamed : plain)["ids"]) << what;
    EXPECT_GT(j["draft_tokens"].get<int64_t>(), 0) << what;
    EXPECT_LE(j["draft_accepted"].get<int64_t>(), j["draft_tokens"].get<int64_t>()) << what;
    if (what == "dspark, prompt cache reused") {
      EXPECT_GT(j["timings"]["cached_tokens"].get<int64_t>(), 0) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, RunSpec, ::testing::ValuesIn(kFiles),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CliSpec, BadFlagsAreRefused) {
  const std::string path = make_model(tiny(GgmlType::F32, GgmlType::F32), "cli_f32");
  const std::string run = k3_bin() + " run -m " + path + " -n 4 -p hi ";
  const std::pair<std::string, std::string> bad[] = {
      {"--spec-type dspark", "needs a draft model"},
      {"--spec-type magic", "expected ngram or dspark"},
      {"--draft-max 3", "need a draft model"},
      {"-md /nonexistent.gguf", "/nonexistent.gguf"},
      {"--spec-type ngram -md " + path, "takes no draft model"},
      {"-md " + path, "kimi-k3-dspark"},  // a target is not a draft
  };
  std::string out;
  for (const auto& [flags, msg] : bad) {
    EXPECT_NE(run_cmd(run + flags, &out), 0) << flags;
    EXPECT_NE(out.find(msg), std::string::npos) << flags << ": " << out;
  }
}

TEST(CliSpec, BenchMeasuresTheCurveAndAScriptedDecode) {
  const std::string path = make_model(tiny(GgmlType::F32, GgmlType::F32), "cli_f32");
  auto m = model::Model::load(path);
  const std::string draft = make_draft(*m, "cli_draft_f32", "--taps 1,7 --seed 9");
  const std::string text = temp_path("cli_script.txt");
  std::ofstream(text) << "int add(int a, int b) { return a + b; }\nint add(int a, int b) { return a + b; }\n";
  const json j = run_json(k3_bin() + " bench -m " + path + " -p 0 -n 0 -r 2 -t 1 --membw-mib 0 --json --verify-curve 3 "
                          "--spec-context 16 -md " + draft + " --script " + text);
  const json& curve = j["spec"]["verify"]["curve"];
  ASSERT_EQ(curve.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(curve[k]["drafts"], k);
    EXPECT_GT(curve[k]["pass_ms"].get<double>(), 0);
    EXPECT_GE(curve[k]["distinct_experts"].get<double>(), curve[k > 0 ? k - 1 : 0]["distinct_experts"].get<double>());
  }
  EXPECT_EQ(j["spec"]["draft"]["blocks"].size(), 7u);
  const json& s = j["spec"]["scripted"];
  EXPECT_GT(s["spec_tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(s["type"], "dspark");
}

}  // namespace
