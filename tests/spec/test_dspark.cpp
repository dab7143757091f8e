// The DSpark draft (dspark.md §3-§8): `k3 draft` against the independent numpy reference of
// dspark_ref.py on a checkpoint that script wrote and `k3 convert` converted (tokens equal up to a
// near tie, hidden rows close: tight for an F32 draft, §14's bound for BF16), the converter's and
// the fit check's refusals with messages naming the mismatch, and quantized drafts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "spec_helpers.h"

using namespace k3;
using namespace k3::test;
using nlohmann::json;

namespace {

model::SynthOptions target_opts() {
  model::SynthOptions o = model::synth_preset("tiny");  // 9 layers, H 64
  o.seed = 31;
  return o;
}

json run_json(const std::string& cmd) {
  std::string out;
  const int rc = run_cmd(cmd, &out, false);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  try {
    return json::parse(out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << cmd << ": not JSON: " << out.substr(0, 400);
    return json::object();
  }
}

// §14's comparison of a draft with the reference.
void compare(const json& got, const json& ref, double hidden_tol, const std::string& what) {
  ASSERT_EQ(got["tokens"].size(), ref["tokens"].size()) << what;
  const size_t n = ref["tokens"].size();
  bool tied = false;
  for (size_t t = 0; t < n; ++t) {
    if (ref["margins"][t].get<double>() < 0.1) tied = true;  // the Markov chain carries a flip forward
    if (!tied) {
      EXPECT_EQ(got["tokens"][t], ref["tokens"][t]) << what << " row " << t;
    }
    double worst = 0;
    for (size_t i = 0; i < ref["hidden"][t].size(); ++i) {
      const double r = ref["hidden"][t][i].get<double>(), g = got["hidden"][t][i].get<double>();
      worst = std::max(worst, std::fabs(r - g) / std::max(1.0, std::fabs(r)));
    }
    EXPECT_LE(worst, hidden_tol) << what << " hidden row " << t;
    for (size_t k = 0; k < 5; ++k) {
      const double r = ref["base_top"][t][k]["logit"].get<double>(), g = got["base_top"][t][k]["logit"].get<double>();
      EXPECT_NEAR(g, r, 0.1) << what << " row " << t << " base top " << k;
    }
  }
}

TEST(Dspark, DraftAgreesWithTheReference) {
  const std::string target = make_model(target_opts(), "ds_target");
  auto m = model::Model::load(target);
  const std::string bf16 = make_draft(*m, "ds_draft", "--taps 2,5,7 --seed 7");
  ASSERT_FALSE(bf16.empty());
  const std::string f32 = temp_path("ds_draft_f32.gguf");
  std::string log;
  ASSERT_EQ(run_cmd(k3_bin() + " quantize -q " + bf16 + " " + f32 + " f32", &log), 0) << log;
  for (const std::vector<int32_t>& ids : {prompt_ids(12, m->n_vocab(), 3), prompt_ids(30, m->n_vocab(), 8),
                                          std::vector<int32_t>{5}}) {
    const std::vector<int32_t> ctx(ids.begin(), ids.end() - 1);
    const std::string dump = temp_path("ds_dump_" + std::to_string(ids.size()));
    std::filesystem::remove_all(dump);
    if (!ctx.empty())
      ASSERT_EQ(run_cmd(k3_bin() + " logits -m " + target + " --ids " + join_ids(ctx) + " --dump " + dump + " -o " +
                            temp_path("ds_logits.json"),
                        &log),
                0)
          << log;
    else
      std::filesystem::create_directories(dump), std::ofstream(dump + "/index.json") << R"({"tensors":[]})";
    const int n = 6;
    json ref = run_json("/usr/bin/python3 " + ref_script() + " forward --hf " + temp_path("ds_draft-hf") + " --target " +
                        target + " --dump " + dump + " --ids " + join_ids(ids) + " -n " + std::to_string(n));
    for (const auto& [file, tol] : {std::pair{f32, 1e-3}, std::pair{bf16, 5e-2}}) {
      json got = run_json(k3_bin() + " draft -m " + target + " --draft " + file + " --ids " + join_ids(ids) + " -n " +
                          std::to_string(n) + " --json -t 2");
      compare(got, ref, tol, file + " context " + std::to_string(ctx.size()));
    }
  }
}

// A draft whose hidden size, vocabulary, layer count or tap layers do not fit is refused, the
// message naming the mismatch; so are checkpoints the converter does not know.
TEST(Dspark, MisfitDraftsAreRefused) {
  const std::string target = make_model(target_opts(), "ds_target");
  auto m = model::Model::load(target);
  const std::string ids = "--ids 1,2,3 -n 2";
  struct Bad {
    const char* name;
    std::string flags, message;
  };
  const Bad bad[] = {
      {"ds_bad_hidden", "--hidden 32", "hidden size"},
      {"ds_bad_vocab", "--vocab 512", "vocabulary"},
      {"ds_bad_layers", "--target-layers 12", "layers"},
      {"ds_bad_tap", "--taps 1,4,9", "tap layers"},
      {"ds_bad_tap_twice", "--taps 1,4,4", "tap layers"},
  };
  std::string log;
  for (const Bad& b : bad) {
    const std::string hf = temp_path(std::string(b.name) + "-hf");
    const int H = b.flags == "--hidden 32" ? 32 : 64, V = b.flags == "--vocab 512" ? 512 : static_cast<int>(m->n_vocab());
    const int L = b.flags == "--target-layers 12" ? 12 : 9;
    ASSERT_EQ(run_cmd("/usr/bin/python3 " + ref_script() + " write " + hf + " --hidden " + std::to_string(H) +
                          " --vocab " + std::to_string(V) + " --target-layers " + std::to_string(L) + " " +
                          (b.flags.rfind("--taps", 0) == 0 ? b.flags : ""),
                      &log),
              0)
        << log;
    ASSERT_EQ(run_cmd(k3_bin() + " convert -q --src " + hf + " --out-dir " + temp_dir() + " --name " + b.name, &log), 0)
        << log;
    const int rc = run_cmd(k3_bin() + " draft -m " + target + " --draft " + temp_path(std::string(b.name) + ".gguf") + " " + ids, &log);
    EXPECT_NE(rc, 0) << b.name;
    EXPECT_NE(log.find("does not fit"), std::string::npos) << b.name << ": " << log;
    EXPECT_NE(log.find(b.message), std::string::npos) << b.name << ": " << log;
    EXPECT_EQ(log.find("Segmentation"), std::string::npos) << log;
  }
  // the converter's refusals (§3.3)
  const std::string hf = temp_path("ds_conv-hf");
  ASSERT_EQ(run_cmd("/usr/bin/python3 " + ref_script() + " write " + hf, &log), 0) << log;
  auto patch_config = [&](const std::string& key, const json& v) {
    std::ifstream in(hf + "/config.json");
    json c = json::parse(in);
    if (v.is_null()) c.erase(key);
    else c[key] = v;
    std::ofstream(hf + "/config.json") << c.dump();
  };
  const std::pair<std::string, json> refusals[] = {{"mla_use_output_gate", true}, {"mla_use_nope", true},
                                                   {"markov_head_type", "gated"}, {"draft_vocab_size", 512},
                                                   {"hidden_act", "gelu"}, {"num_target_layers", 4}};
  for (const auto& [key, v] : refusals) {
    patch_config(key, v);
    EXPECT_NE(run_cmd(k3_bin() + " convert -q --src " + hf + " --out-dir " + temp_dir() + " --name ds_conv", &log), 0) << key;
    EXPECT_NE(log.find(key), std::string::npos) << key << ": " << log;
    patch_config(key, nullptr);
  }
  EXPECT_EQ(run_cmd(k3_bin() + " convert -q --src " + hf + " --out-dir " + temp_dir() + " --name ds_conv", &log), 0) << log;
  EXPECT_FALSE(std::filesystem::exists(temp_path("ds_conv.gguf.tmp")));
}

// k3 quantize makes Q8_0 and K-quant drafts; the per-head matrices stay in the types allowed there.
TEST(Dspark, QuantizedDraftsLoad) {
  model::SynthOptions o = model::synth_preset("small");  // H 256: K-quant rows
  o.n_layer = 5;
  const std::string target = make_model(o, "ds_small");
  auto m = model::Model::load(target);
  const std::string bf16 = make_draft(*m, "ds_small_draft", "--taps 1,2,3 --q-lora 256 --kv-lora 256 --nope 32 --ff 256");
  ASSERT_FALSE(bf16.empty());
  std::string log;
  for (const char* t : {"q8_0", "q4_K"}) {
    const std::string q = temp_path(std::string("ds_small_draft_") + t + ".gguf");
    ASSERT_EQ(run_cmd(k3_bin() + " quantize -q " + bf16 + " " + q + " " + t, &log), 0) << log;
    const gguf::Model f = gguf::Model::open(q);
    EXPECT_EQ(f.get("blk.0.attn_k_b.weight").type, GgmlType::Q8_0) << t;
    EXPECT_EQ(f.get("blk.0.attn_norm.weight").type, GgmlType::F32) << t;
    EXPECT_EQ(f.get("blk.0.ffn_up.weight").type, std::string(t) == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_K) << t;
    const json got = run_json(k3_bin() + " draft -m " + target + " --draft " + q + " --ids 4,9,2,7 -n 3 --json");
    EXPECT_EQ(got["tokens"].size(), 3u) << t;
  }
}

}  // namespace
