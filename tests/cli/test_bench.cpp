// k3 bench --json on a tiny synthetic model: the fields exist and are consistent, and the weight
// bytes per generated token match an independent count from the file's tensor table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "gguf/gguf.h"
#include "support/cpu_family.h"
#include "tensor/kernels.h"

using nlohmann::json;

namespace {

std::string k3_bin() {
  const char* d = std::getenv("K3_BIN_DIR");
  return std::string(d ? d : K3_BIN_DIR_FALLBACK) + "/k3";
}

int run(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out->append(buf.data(), n);
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// One tiny model per test process (the default tiny preset: 9 layers, 8 experts, top 2).
const std::string& tiny_model() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("k3_cli_bench_" + std::to_string(getpid()) + ".gguf");
    std::string out;
    EXPECT_EQ(run(k3_bin() + " make-tiny -q --out " + p.string(), &out), 0) << out;
    return p.string();
  }();
  return path;
}

struct Cleanup : ::testing::Environment {
  void TearDown() override { std::filesystem::remove(tiny_model()); }
};
const auto* kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

TEST(Bench, JsonFieldsAndBytesPerToken) {
  std::string out;
  ASSERT_EQ(run(k3_bin() + " bench -m " + tiny_model() + " -p 16 -n 8 -r 2 -t 1 --membw-mib 16 --json", &out), 0) << out;
  const json j = json::parse(out.substr(out.find('{')));
  for (const char* k : {"pp_tokens_per_s", "pp_stddev", "tg_tokens_per_s", "tg_stddev", "bytes_per_token", "gbps",
                        "membw_gbps", "roofline_fraction", "rss_bytes", "rss_peak_bytes", "rss_file_bytes",
                        "rss_anon_bytes", "rss_file_huge_bytes", "rss_anon_huge_bytes"})
    ASSERT_TRUE(j.contains(k) && j[k].is_number()) << k << " in " << out;
  EXPECT_GT(j["pp_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["tg_tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(j["pp_samples"].size(), 2u);
  EXPECT_EQ(j["tg_samples"].size(), 2u);
  EXPECT_GT(j["membw_gbps"].get<double>(), 0);
  EXPECT_EQ(j["membw_probe_bytes"].get<uint64_t>(), 16u << 20);
  EXPECT_GE(j["rss_peak_bytes"].get<double>(), j["rss_bytes"].get<double>());
  EXPECT_GT(j["rss_bytes"].get<double>(), 0);
  EXPECT_LE(j["rss_file_huge_bytes"].get<double>(), j["rss_file_bytes"].get<double>());
  EXPECT_LE(j["rss_anon_huge_bytes"].get<double>(), j["rss_anon_bytes"].get<double>());
  EXPECT_NEAR(j["gbps"].get<double>(), j["tg_tokens_per_s"].get<double>() * j["bytes_per_token"].get<double>() / 1e9,
              1e-9 * j["gbps"].get<double>() + 1e-12);

  // Independent count: every tensor whole, except one row of token_embd and k/E of each expert stack.
  const auto file = k3::gguf::Model::open(tiny_model());
  const std::string arch = "kimi-k3";
  const double E = file.meta().get_u32(arch + ".expert_count");
  const uint32_t L = file.meta().get_u32(arch + ".block_count");
  const double k = file.meta().get_u32_per_layer(arch + ".expert_used_count", L)[0];  // uniform in make-tiny
  double want = 0;
  for (const auto* t : file.tensors()) {
    const double b = static_cast<double>(t->nbytes);
    if (t->name == "token_embd.weight") want += b / static_cast<double>(t->ne[1]);
    else if (t->name.find("_exps.weight") != std::string::npos) want += b * k / E;
    else want += b;
  }
  EXPECT_NEAR(j["bytes_per_token"].get<double>(), want, 1e-6 * want);
}

TEST(Bench, ProfileAndErrors) {
  std::string out;
  ASSERT_EQ(run(k3_bin() + " bench -m " + tiny_model() + " -p 8 -n 4 -r 1 -t 1 --membw-mib 0 --profile --json", &out), 0)
      << out;
  const json j = json::parse(out.substr(out.find('{')));
  EXPECT_TRUE(j["membw_gbps"].is_null());
  ASSERT_TRUE(j["profile"]["tg"].is_array());
  double share = 0;
  bool saw_lm_head = false;
  for (const auto& e : j["profile"]["tg"]) {
    share += e["share"].get<double>();
    saw_lm_head |= e["op"] == "result_output";
  }
  EXPECT_NEAR(share, 1.0, 1e-6);
  EXPECT_TRUE(saw_lm_head);
  EXPECT_NE(run(k3_bin() + " bench -m " + tiny_model() + " -p 0 -n 0", &out), 0);
  EXPECT_NE(run(k3_bin() + " bench -m /nonexistent.gguf -p 4 -n 4", &out), 0);
}

// The weight prefetch setting: the CPU's default (l1:2048+q8_0 on Intel, l2:8192 elsewhere) unless
// K3_PREFETCH says otherwise (a level alone keeps the default's distance; +q8_0 adds the Q8_0 decode
// rows; off turns the prefetches off), bad values refused by name.
TEST(Bench, PrefetchSetting) {
  const std::string cmd = k3_bin() + " bench -m " + tiny_model() + " -p 4 -n 2 -r 1 -t 1 --membw-mib 0 --json";
  const bool intel = k3::cpu_ident().intel();
  const std::string ahead = intel ? "2048" : "8192";
  std::printf("CPU: %s\n", k3::test::cpu_family().c_str());
  for (auto [env, want] : {std::pair<std::string, std::string>{"", intel ? "l1:2048+q8_0" : "l2:8192"}, {"l1", "l1:" + ahead},
                           {"l2:4096", "l2:4096"}, {"l1:16384", "l1:16384"}, {"l2+q8_0", "l2:" + ahead + "+q8_0"},
                           {"l1:4096+q8_0", "l1:4096+q8_0"}, {"off", "off"}}) {
    std::string out;
    ASSERT_EQ(run((!env.empty() ? "K3_PREFETCH=" + env + " " : std::string()) + cmd, &out), 0) << out;
    const json j = json::parse(out.substr(out.find('{')));
    EXPECT_EQ(j["prefetch"], want) << env;
  }
  for (auto [env, msg] : {std::pair{"l3", "K3_PREFETCH=l3: expected off, l1 or l2, optionally :BYTES and +q8_0"},
                          {"off+q8_0", "K3_PREFETCH=off+q8_0: expected off, l1 or l2"},
                          {"l2+q4_0", "K3_PREFETCH=l2+q4_0: expected off, l1 or l2"},
                          {"l2:4096+q8_0x", "K3_PREFETCH=l2:4096+q8_0x: the distance must be"},
                          {"l2:100", "K3_PREFETCH=l2:100: the distance must be 256-65536 bytes, a multiple of 64"},
                          {"l2:4100", "K3_PREFETCH=l2:4100: the distance must be"},
                          {"l2:", "K3_PREFETCH=l2:: the distance must be"},
                          {"l2:4096x", "K3_PREFETCH=l2:4096x: the distance must be"},
                          {"off:4096", "K3_PREFETCH=off:4096: expected off, l1 or l2"}}) {
    std::string out;
    EXPECT_NE(run("K3_PREFETCH=" + std::string(env) + " " + cmd, &out), 0) << env;
    EXPECT_NE(out.find(msg), std::string::npos) << out;
  }
}

}  // namespace

// Q8_0 and MXFP4 matrices 256 wide are repacked at load (Model::repack_weights): bench reports how
// many bytes, --no-repack keeps the file's layout, and the logits are the same bits either way
// (mapped, streamed, --no-mmap). On a k3 file and on one the node writer made (its MXFP4 experts).
void check_repack(const std::string& model, double min_bytes) {
  std::string out;
  const std::string bench = k3_bin() + " bench -m " + model + " -p 4 -n 2 -r 1 -t 1 --membw-mib 0 --json";
  ASSERT_EQ(run(bench, &out), 0) << out;
  EXPECT_GT(json::parse(out.substr(out.find('{')))["repacked_bytes"].get<double>(), min_bytes) << out;
  ASSERT_EQ(run(bench + " --no-repack", &out), 0) << out;
  EXPECT_EQ(json::parse(out.substr(out.find('{')))["repacked_bytes"].get<double>(), 0) << out;
  const std::string logits = k3_bin() + " logits -m " + model + " --ids 1,5,9,20,7 --mode incremental -t 2";
  std::string want, got;
  ASSERT_EQ(run(logits + " --no-repack", &want), 0) << want;
  for (const char* flags : {"", " --no-mmap", " --expert-cache 1"}) {
    ASSERT_EQ(run(logits + flags, &got), 0) << got;
    EXPECT_EQ(got, want) << model << " flags:" << flags;
  }
}

TEST(Bench, RepackedBytesAndTheSameLogits) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string own = (dir / ("k3_cli_repack_" + std::to_string(getpid()) + ".gguf")).string();
  const std::string node = (dir / ("k3_cli_repack_node_" + std::to_string(getpid()) + ".gguf")).string();
  std::string out;
  ASSERT_EQ(run(k3_bin() + " make-tiny -q --hidden 256 --latent 256 --expert-ff 256 --q-lora 256 --kv-lora 256"
                           " --type q8_0 --expert-type mxfp4 --out " + own, &out), 0) << out;
  check_repack(own, 1e6);
  ASSERT_EQ(run("node " K3_NODE_DIR "/make_tiny_kimi_k3.mjs " + node + " --wide --experts mxfp4", &out), 0) << out;
  check_repack(node, 1e5);
  std::filesystem::remove(own);
  std::filesystem::remove(node);
}

// The decode chunk rule (decode_chunks): 2 chunks a thread of at most 1 MiB on Intel, 1 of 4 MiB on
// AMD Zen 5, 4 of 512 KiB elsewhere, unless K3_DECODE_CHUNKS says otherwise; bad values refused by name.
TEST(Bench, DecodeChunks) {
  for (auto [vendor, family, claims, kib] : {std::tuple<const char*, unsigned, int, size_t>{"GenuineIntel", 6, 2, 1024},
                                             {"AuthenticAMD", 0x1A, 1, 4096},
                                             {"AuthenticAMD", 0x19, 4, 512},
                                             {"AuthenticAMD", 0x17, 4, 512},
                                             {"", 0, 4, 512}}) {
    const k3::DecodeChunks rule = k3::default_decode_chunks({vendor, family, 0});
    EXPECT_EQ(rule.per_thread, claims) << vendor << " family " << family;
    EXPECT_EQ(rule.max_kib, kib) << vendor << " family " << family;
  }
  const std::string cmd = k3_bin() + " bench -m " + tiny_model() + " -p 0 -n 2 -r 1 -t 2 --membw-mib 0 --json";
  std::printf("CPU: %s\n", k3::test::cpu_family().c_str());
  const k3::DecodeChunks here = k3::default_decode_chunks(k3::cpu_ident());
  for (auto [env, claims, kib] : {std::tuple<std::string, int, int>{"", here.per_thread, static_cast<int>(here.max_kib)},
                                  {"4:512", 4, 512}, {"1:65536", 1, 65536}, {"64:64", 64, 64}}) {
    std::string out;
    ASSERT_EQ(run((!env.empty() ? "K3_DECODE_CHUNKS=" + env + " " : std::string()) + cmd, &out), 0) << out;
    const json j = json::parse(out.substr(out.find('{')))["decode_chunks"];
    EXPECT_EQ(j["per_thread"], claims) << env;
    EXPECT_EQ(j["max_kib"], kib) << env;
  }
  for (const char* env : {"0:512", "65:512", "4:32", "4:70000", "4", "4:512x", "x:512", ":"}) {
    std::string out;
    EXPECT_NE(run("K3_DECODE_CHUNKS=" + std::string(env) + " " + cmd, &out), 0) << env;
    EXPECT_NE(out.find("K3_DECODE_CHUNKS=" + std::string(env) + ": expected CLAIMS:KIB"), std::string::npos) << out;
  }
}

// The switchable decode rows (decode_in_parts): two streams a thread on Intel, one elsewhere, unless
// K3_DECODE_STREAMS says otherwise; bad values refused by name.
TEST(Bench, DecodeStreams) {
  const std::string cmd = k3_bin() + " bench -m " + tiny_model() + " -p 0 -n 2 -r 1 -t 1 --membw-mib 0 --json";
  std::printf("CPU: %s\n", k3::test::cpu_family().c_str());
  const int cpu = k3::cpu_ident().intel() ? 2 : 1;
  for (auto [env, want] : {std::pair<std::string, int>{"", cpu}, {"1", 1}, {"2", 2}}) {
    std::string out;
    ASSERT_EQ(run((!env.empty() ? "K3_DECODE_STREAMS=" + env + " " : std::string()) + cmd, &out), 0) << out;
    EXPECT_EQ(json::parse(out.substr(out.find('{')))["decode_streams"], want) << env;
  }
  for (const char* env : {"0", "3", "two", "2x"}) {
    std::string out;
    EXPECT_NE(run("K3_DECODE_STREAMS=" + std::string(env) + " " + cmd, &out), 0) << env;
    EXPECT_NE(out.find("K3_DECODE_STREAMS=" + std::string(env) + ": expected 1 or 2"), std::string::npos) << out;
  }
}
