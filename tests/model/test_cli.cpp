// The model commands end to end: k3 make-tiny, k3 logits (modes, --dump), k3 run (--json, -p,
// the built-in model, errors, --prompt-cache).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "helpers.h"
#include "model/synth_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace k3;
using namespace k3::test;
using nlohmann::json;

namespace {

std::string k3_bin() {
  const char* d = std::getenv("K3_BIN_DIR");
  const std::string p = std::string(d ? d : K3_BIN_DIR_FALLBACK) + "/k3";
  if (!std::filesystem::exists(p)) ADD_FAILURE() << "k3 binary missing: " << p;
  return p;
}

std::string tiny_cli_model() {
  const std::string p = temp_path("cli_tiny.gguf");
  if (!std::filesystem::exists(p)) {
    std::string out;
    EXPECT_EQ(run_cmd(k3_bin() + " make-tiny -q --out " + p + " --layers 5 --seed 3", &out), 0) << out;
  }
  return p;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

TEST(Cli, MakeTinyWritesLoadableModel) {
  auto m = model::Model::load(tiny_cli_model());
  EXPECT_EQ(m->hparams().n_layer, 5u);
  EXPECT_EQ(m->hparams().attn_kind(3), model::AttnKind::MLA);
  EXPECT_EQ(m->hparams().attn_kind(4), model::AttnKind::MLA);
  std::string out;
  EXPECT_NE(run_cmd(k3_bin() + " make-tiny --out " + temp_path("x.gguf") + " --type nope", &out), 0);
  EXPECT_NE(out.find("unknown type"), std::string::npos) << out;
}

// make-tiny --vocab 163840: Kimi-K3's vocabulary layout (the learned ranks, reserved control ids up
// to 163583, the K3 specials at their ids); the tokenizer round-trips, llama.cpp loads the file and
// tokenizes exactly as k3 does.
TEST(Cli, MakeTinyK3Vocabulary) {
  const std::string p = temp_path("cli_vocab.gguf");
  std::string out;
  ASSERT_EQ(run_cmd(k3_bin() + " make-tiny -q --out " + p + " --layers 2 --vocab 163840", &out), 0) << out;
  auto m = model::Model::load(p);
  EXPECT_EQ(m->n_vocab(), 163840);
  auto tok = tok::Tokenizer::from_metadata(m->meta());
  EXPECT_EQ(tok->token_text(163584), "[BOS]");
  EXPECT_EQ(tok->token_text(163586), "<|end_of_msg|>");
  EXPECT_EQ(tok->token_text(163605), "<|media_pad|>");
  EXPECT_EQ(tok->token_text(163839), "[PAD]");
  EXPECT_EQ(tok->token_text(100000), "<|reserved_token_100000|>");
  EXPECT_EQ(m->meta().get_u32_or("tokenizer.ggml.eos_token_id", 0), 163586u);
  const std::string text = model::synth_text() + "Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac 1234567 <|end_of_msg|>";
  const std::vector<int32_t> ids = tok->encode(text, true);
  EXPECT_EQ(tok->decode(ids, true), text);
  EXPECT_EQ(ids.back(), 163586);
  const std::string in = temp_path("vocab_text.json"), ids_out = temp_path("vocab_ids.json");
  std::ofstream(in) << json::array({text}).dump();
  ASSERT_EQ(run_cmd("node " + llama_harness() + " tokenize --model " + p + " --special --in " + in + " --out " + ids_out,
                    &out),
            0)
      << out;
  EXPECT_EQ(read_json(ids_out)[0].get<std::vector<int32_t>>(), ids);
}

TEST(Cli, LogitsModesAgreeWithLibrary) {
  const std::string model = tiny_cli_model();
  auto m = model::Model::load(model);
  const std::vector<int32_t> ids = {5, 300, 17, 767, 42, 9, 511};
  const Rows lib = k3_logits(*m, ids, 0);
  for (const char* mode : {"batch", "incremental", "chunked --chunk 3"}) {
    const std::string out_json = temp_path("cli_logits.json");
    std::string out;
    ASSERT_EQ(run_cmd(k3_bin() + " logits -m " + model + " --ids 5,300,17,767,42,9,511 -t 1 --mode " + mode +
                          " --out " + out_json,
                      &out),
              0)
        << out;
    const json j = read_json(out_json);
    ASSERT_EQ(j["n_vocab"].get<int>(), m->n_vocab());
    ASSERT_EQ(j["rows"].size(), ids.size());
    Rows cli;
    cli.n_vocab = m->n_vocab();
    for (const auto& r : j["rows"]) cli.rows.push_back(r["logits"].get<std::vector<float>>());
    EXPECT_LE(max_abs_diff(cli, lib), 1e-4) << mode;
  }
}

TEST(Cli, DumpWritesNamedIntermediates) {
  const std::string dir = temp_path("dump");
  std::string out;
  ASSERT_EQ(run_cmd(k3_bin() + " logits -m " + tiny_cli_model() + " --ids 1,2,3 --dump " + dir + " --out " +
                        temp_path("d.json"),
                    &out),
            0)
      << out;
  const json idx = read_json(dir + "/index.json");
  std::set<std::string> names;
  for (const auto& t : idx["tensors"]) {
    names.insert(t["name"].get<std::string>() + "." + std::to_string(t["layer"].get<int>()));
    EXPECT_EQ(t["rows"].get<int>(), 3);
    EXPECT_EQ(std::filesystem::file_size(dir + "/" + t["file"].get<std::string>()),
              3u * t["n"].get<uint64_t>() * sizeof(float));
  }
  for (const char* n : {"inp_embd.-1", "attn_norm.0", "kda_out.0", "ffn_out.0", "mla_out.3", "ffn_moe_out.1",
                        "l_out.4", "result_output.-1"})
    EXPECT_TRUE(names.count(n)) << n;
}

TEST(Cli, RunJsonGreedyMatchesLibrary) {
  const std::string model = tiny_cli_model();
  std::string out;
  ASSERT_EQ(run_cmd(k3_bin() + " run -m " + model + " --ids 10,20,30 -n 12 --temp 0 --ignore-eos --json -t 1", &out,
                    false),
            0)
      << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), (std::vector<int32_t>{10, 20, 30}));
  auto m = model::Model::load(model);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), k3_generate(*m, {10, 20, 30}, 12));
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_GT(j["timings"]["prompt_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["timings"]["gen_tokens_per_s"].get<double>(), 0.0);
}

TEST(Cli, RunTextPromptAndSampling) {
  const std::string model = tiny_cli_model();
  std::string a, b;
  const std::string cmd = k3_bin() + " run -m " + model + " -p 'The keeper counted ships' -n 8 --temp 0.9 "
                                     "--top-k 20 --top-p 0.9 --min-p 0.02 --seed 7 --ignore-eos --json -t 1";
  ASSERT_EQ(run_cmd(cmd, &a, false), 0) << a;
  ASSERT_EQ(run_cmd(cmd, &b, false), 0) << b;
  EXPECT_EQ(json::parse(a)["ids"], json::parse(b)["ids"]);  // seeded
  EXPECT_GE(json::parse(a)["prompt_ids"].size(), 2u);
  EXPECT_EQ(json::parse(a)["ids"].size(), 8u);
}

// The main job: stdout and stderr merged into one stream (a pipe, like `> log 2>&1`) keep the
// generated text and every message on lines of their own, whatever bytes the random model writes.
TEST(Cli, RunBuiltinModel) {
  const std::string cache = temp_path("xdg");
  const std::string run = "XDG_CACHE_HOME=" + cache + " " + k3_bin() + " run -t 1 -p 'The quick brown fox' ";
  auto own_line = [](const std::string& out, const std::string& msg) {
    const size_t at = out.find(msg);
    return at != std::string::npos && (at == 0 || out[at - 1] == '\n');
  };
  std::string out;
  ASSERT_EQ(run_cmd(run + "-n 16", &out), 0) << out;
  EXPECT_NE(out.find("RANDOM"), std::string::npos) << out;
  EXPECT_NE(out.find("k3 run -m MODEL.gguf"), std::string::npos) << out;  // how to run a real one
  EXPECT_TRUE(own_line(out, "k3 run: prompt ")) << out;
  EXPECT_TRUE(std::filesystem::exists(cache + "/k3/synthetic-tiny-v1.gguf"));
  // Stopped by the context size: the text ends its line before the message, then the statistics.
  ASSERT_EQ(run_cmd(run + "-n 64 -c 20 --ignore-eos", &out), 0) << out;
  EXPECT_TRUE(own_line(out, "k3 run: context size 20 reached")) << out;
  EXPECT_TRUE(own_line(out, "k3 run: prompt ")) << out;
}

// Streaming experts (--expert-cache): the same greedy ids at the smallest cache, a routing trace
// that k3 cache-sim replays, warmup from that trace, counters in --json, bad sizes rejected.
TEST(Cli, RunStreamingExpertsMatchesMapped) {
  const std::string model = tiny_cli_model();
  const std::string base = k3_bin() + " run -m " + model + " --ids 10,20,30 -n 12 --temp 0 --ignore-eos --json -t 1";
  const std::string trace = temp_path("cli_trace.txt");
  std::string out, ref;
  ASSERT_EQ(run_cmd(base, &ref, false), 0) << ref;
  ASSERT_EQ(run_cmd(base + " --expert-cache 1 --routing-trace " + trace, &out, false), 0) << out;
  const json a = json::parse(ref), b = json::parse(out);
  EXPECT_EQ(a["ids"], b["ids"]);
  EXPECT_GT(b["experts"]["misses"].get<double>(), 0.0);
  ASSERT_EQ(run_cmd(base + " --expert-cache 64M --warmup " + trace + " --pin-hot 0.5 --no-prefetch", &out, false), 0)
      << out;
  EXPECT_EQ(a["ids"], json::parse(out)["ids"]);
  EXPECT_EQ(json::parse(out)["experts"]["misses"].get<double>(), 0.0);  // the trace's experts were warmed
  ASSERT_EQ(run_cmd(k3_bin() + " cache-sim " + trace + " --sizes 4 16 --json", &out, false), 0) << out;
  const json sim = json::parse(out);
  ASSERT_EQ(sim["results"].size(), 6u);
  for (const auto& r : sim["results"]) EXPECT_GE(r["hit_rate"].get<double>(), 0.0);
  EXPECT_EQ(run_cmd(base + " --expert-cache 12Q", &out), 1);
  EXPECT_NE(out.find("--expert-cache"), std::string::npos) << out;
}

// --no-mmap: the weights copied into anonymous memory give the mapped run's ids; with streamed
// experts it is refused, naming both flags.
TEST(Cli, RunNoMmapMatchesMapped) {
  const std::string model = tiny_cli_model();
  const std::string base = k3_bin() + " run -m " + model + " --ids 10,20,30 -n 12 --temp 0 --ignore-eos --json -t 1";
  std::string out, ref;
  ASSERT_EQ(run_cmd(base + " --expert-cache off", &ref, false), 0) << ref;
  ASSERT_EQ(run_cmd(base + " --no-mmap", &out, false), 0) << out;
  EXPECT_EQ(json::parse(ref)["ids"], json::parse(out)["ids"]);
  EXPECT_EQ(run_cmd(base + " --no-mmap --expert-cache 64M", &out), 1);
  EXPECT_NE(out.find("--no-mmap"), std::string::npos) << out;
  EXPECT_NE(out.find("--expert-cache"), std::string::npos) << out;
}

namespace {
json run_ids(const std::string& model, const std::string& ids, const std::string& extra) {
  std::string out;
  EXPECT_EQ(run_cmd(k3_bin() + " run -m " + model + " --ids " + ids + " -n 6 --temp 0 --ignore-eos --json -t 1 -b 4 " +
                        extra,
                    &out, false),
            0)
      << out;
  return json::parse(out);
}
}  // namespace

// k3 run --prompt-cache FILE: the first run saves the state after the prompt, a second run of the
// same prompt reuses all of it, a longer prompt that starts the same way its shared part; every
// output equals a run without the file. A file of another model, or a damaged one, is refused
// with a message and left as it is.
TEST(Cli, RunReusesThePromptCacheFile) {
  const std::string model = make_model(config_a(1e-5f), "cache_cli_a");
  const std::string file = temp_path("run.prompt-cache");
  std::filesystem::remove(file);
  const std::string a = "11,12,13,14,15,16,17,18,19,20", ab = a + ",21,22,23";
  const json plain_a = run_ids(model, a, ""), plain_ab = run_ids(model, ab, "");

  const json first = run_ids(model, a, "--prompt-cache " + file);
  EXPECT_EQ(first["timings"]["cached_tokens"], 0);
  EXPECT_EQ(first["ids"], plain_a["ids"]);
  ASSERT_TRUE(std::filesystem::exists(file));
  const json again = run_ids(model, a, "--prompt-cache " + file);
  EXPECT_EQ(again["timings"]["cached_tokens"], 10);
  EXPECT_EQ(again["ids"], plain_a["ids"]);
  const json longer = run_ids(model, ab, "--prompt-cache " + file);
  EXPECT_EQ(longer["timings"]["cached_tokens"], 10);
  EXPECT_EQ(longer["ids"], plain_ab["ids"]);

  const std::string other = make_model(config_b(1e-5f), "cache_cli_b");
  const auto size = std::filesystem::file_size(file);
  int rc = 0;
  std::string out;
  rc = run_cmd(k3_bin() + " run -m " + other + " --ids " + a + " -n 2 -t 1 --prompt-cache " + file, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("made for another model or setup"), std::string::npos) << out;
  EXPECT_EQ(std::filesystem::file_size(file), size) << "the file was left as it was";

  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    f.put('\x7f');
  }
  rc = run_cmd(k3_bin() + " run -m " + model + " --ids " + a + " -n 2 -t 1 --prompt-cache " + file, &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
}

TEST(Cli, Errors) {
  const std::string model = tiny_cli_model();
  std::string out;
  EXPECT_EQ(run_cmd(k3_bin() + " run -m " + model + " --ids 1,2,100000 -n 2", &out), 1);
  EXPECT_NE(out.find("outside the vocabulary"), std::string::npos) << out;
  EXPECT_EQ(run_cmd(k3_bin() + " run -m " + model + " --ids 1,2,3,4 -c 2 -n 2", &out), 1);
  EXPECT_NE(out.find("context size"), std::string::npos) << out;
  EXPECT_EQ(run_cmd(k3_bin() + " logits -m " + model + " --ids 1,x --out /dev/null", &out), 1);
  EXPECT_NE(out.find("not a token id"), std::string::npos) << out;
  EXPECT_EQ(run_cmd(k3_bin() + " logits -m " + temp_path("nope.gguf") + " --ids 1", &out), 1);
  EXPECT_NE(out.find("nope.gguf"), std::string::npos) << out;
}

}  // namespace
