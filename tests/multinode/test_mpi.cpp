// One model across several processes, end to end: the real k3 started by the real mpirun on this
// machine, over shared memory and over TCP loopback, against the same k3 run as one process.
// Results must be the same bits (logits, greedy tokens, perplexity, chat), with pipeline stages
// too; each process holds about 1/N of the weights; the traffic model (multinode/traffic.h) matches the
// counted exchanges; a killed process ends the job; mismatched files or kernels are refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "../model/helpers.h"
#include "multinode/traffic.h"
#include "model/model.h"

using namespace k3;
using namespace k3::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// CI runs as root; Open MPI refuses that unless told (docs/multinode.md).
const bool kRootOk = [] {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return true;
}();

std::string k3_bin() {
  const char* d = std::getenv("K3_BIN_DIR");
  return std::string(d ? d : K3_BIN_DIR_FALLBACK) + "/k3";
}

enum class Net { Shm, Tcp };
const char* net_name(Net n) { return n == Net::Shm ? "shared memory" : "TCP loopback"; }

// mpiexec with its session directory in this test's temporary folder: Open MPI creates
// /tmp/ompi.HOST.UID on first use, and two jobs starting at once (tests in parallel, other users)
// can race there ("mkdir: File exists", orte_init fails).
std::string mpiexec() { return std::string(K3_MPIEXEC) + " --oversubscribe --mca orte_tmpdir_base " + temp_dir(); }

// "mpirun ... k3" for np processes over the given transport.
std::string mpirun(int np, Net net) {
  std::string s = mpiexec() + " -np " + std::to_string(np) + " --mca pml ob1";
  s += net == Net::Shm ? " --mca btl self,vader" : " --mca btl self,tcp --mca btl_tcp_if_include lo";
  return s + " " + k3_bin();
}

std::string model(const std::string& name, const std::string& flags) {
  const std::string p = temp_path(name + ".gguf");
  if (!fs::exists(p)) {
    std::string out;
    EXPECT_EQ(run_cmd(k3_bin() + " make-tiny -q --out " + p + " " + flags, &out), 0) << out;
  }
  return p;
}
// The four test models: F32 (4 heads: 1, 1, 2 at 3 processes); F32 without latent MoE and q-LoRA
// (softplus gate); Q8_0 trunk with MXFP4 experts (6 heads, as evenly shared as K3's 96); F16 (with
// the AMX rule, which looks at whole shapes).
std::string f32_model() { return model("f32", "--heads 4 --seed 21"); }
std::string plain_model() { return model("plain", "--heads 3 --no-latent --no-q-lora --softplus-gate --seed 22"); }
std::string quant_model() { return model("quant", "--heads 6 --type q8_0 --expert-type mxfp4 --seed 23"); }
std::string f16_model() { return model("f16", "--heads 4 --type f16 --seed 24"); }

const char* kIds = "1,300,17,767,42,9,511,64,128,5,700,33";

std::vector<std::vector<float>> logits_of(const std::string& cmd, const std::string& file) {
  std::string out;
  EXPECT_EQ(run_cmd(cmd + " --out " + file, &out), 0) << cmd << "\n" << out;
  std::vector<std::vector<float>> rows;
  std::ifstream f(file);
  if (!f) return rows;
  const json j = json::parse(f);
  for (const auto& r : j["rows"]) rows.push_back(r["logits"].get<std::vector<float>>());
  return rows;
}

// Bit for bit, with the first difference in the message.
void expect_same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].size(), b[t].size()) << what;
    for (size_t i = 0; i < a[t].size(); ++i)
      if (std::memcmp(&a[t][i], &b[t][i], sizeof(float)) != 0)
        FAIL() << what << ": position " << t << " logit " << i << ": " << a[t][i] << " vs " << b[t][i];
  }
}

json run_json(const std::string& cmd) {
  std::string out;
  EXPECT_EQ(run_cmd(cmd, &out, false), 0) << cmd << "\n" << out;
  try {
    return json::parse(out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << cmd << ": not JSON: " << out;
    return json::object();
  }
}

std::string greedy(const std::string& m) { return " run -m " + m + " --ids " + kIds + " -n 24 --temp 0 --ignore-eos --json -t 1"; }

TEST(Mpi, LogitsBitIdenticalToOneProcess) {
  for (const std::string& m : {f32_model(), quant_model()}) {
    const auto one = logits_of(k3_bin() + " logits -t 1 -m " + m + " --ids " + kIds, temp_path("one.json"));
    for (Net net : {Net::Shm, Net::Tcp})
      for (int np : {2, 3}) {
        const std::string what = m + " at " + std::to_string(np) + " processes over " + net_name(net);
        expect_same_bits(one, logits_of(mpirun(np, net) + " logits -t 1 -m " + m + " --ids " + kIds, temp_path("n.json")),
                         what);
      }
    // one token at a time: the decode paths (one-token experts, fused projections)
    const auto inc = logits_of(k3_bin() + " logits -t 1 --mode incremental -m " + m + " --ids " + kIds,
                               temp_path("inc1.json"));
    expect_same_bits(inc, logits_of(mpirun(3, Net::Tcp) + " logits -t 1 --mode incremental -m " + m + " --ids " + kIds,
                                    temp_path("incn.json")),
                     m + " token by token at 3 processes");
  }
}

TEST(Mpi, LogitsBitIdenticalWithoutLatentAndWithF16AmxRule) {
  const std::string plain = plain_model(), f16 = f16_model();
  expect_same_bits(logits_of(k3_bin() + " logits -t 1 -m " + plain + " --ids " + kIds, temp_path("p1.json")),
                   logits_of(mpirun(3, Net::Shm) + " logits -t 1 -m " + plain + " --ids " + kIds, temp_path("p3.json")),
                   "no latent, 3 processes");
  // 64-row F16 matrices take the AMX rule; the 21- and 22-row shares must too
  for (const char* rule : {"amx", "round"})
    expect_same_bits(
        logits_of(k3_bin() + " logits -t 1 --f16-rule " + rule + " -m " + f16 + " --ids " + kIds, temp_path("h1.json")),
        logits_of(mpirun(3, Net::Shm) + " logits -t 1 --f16-rule " + rule + " -m " + f16 + " --ids " + kIds,
                  temp_path("h3.json")),
        std::string("F16, rule ") + rule + ", 3 processes");
}

// The types of docs/formats.md under row shares (each process's rows of their blocks): a trunk and
// experts of those types, bit for bit against one process, in a batch and token by token. One line a
// model; widths of 256 so that every type fits the matrices of its class.
TEST(Mpi, LowBitTypesBitIdentical) {
  const char* const kModels[][2] = {
      {"q1_0", "iq3_s"}, {"nvfp4", "tq1_0"}, {"q2_0", "iq3_xxs"}, {"tq2_0", "q1_0"},
      {"iq2_xxs", "iq1_s"},
      {"iq2_s", "iq1_m"},
      {"iq1_s", "iq2_xs"},
  };
  for (const auto& [trunk, experts] : kModels) {
    const std::string m = model(std::string("lowbit_") + trunk + "_" + experts,
                                std::string("--heads 6 --hidden 256 --latent 256 --expert-ff 256 --dense-ff 256 --seed 25 --type ") +
                                    trunk + " --expert-type " + experts);
    for (const char* mode : {"batch", "incremental"}) {
      const std::string args = std::string(" logits -t 1 --mode ") + mode + " -m " + m + " --ids " + kIds;
      expect_same_bits(logits_of(k3_bin() + args, temp_path("lb1.json")), logits_of(mpirun(3, Net::Shm) + args, temp_path("lb3.json")),
                       m + " (" + mode + ") at 3 processes");
    }
  }
}

TEST(Mpi, PipelineStagesBitIdentical) {
  for (const std::string& m : {f32_model(), quant_model()}) {
    const auto one = logits_of(k3_bin() + " logits -t 1 -m " + m + " --ids " + kIds, temp_path("one.json"));
    expect_same_bits(one, logits_of(mpirun(2, Net::Shm) + " logits -t 1 --pp 2 -m " + m + " --ids " + kIds,
                                    temp_path("pp2.json")),
                     m + ": 2 stages of 1");
    expect_same_bits(one, logits_of(mpirun(4, Net::Tcp) + " logits -t 1 --pp 2 -m " + m + " --ids " + kIds,
                                    temp_path("pp4.json")),
                     m + ": 2 stages of 2 over TCP");
  }
  // 70 rows go through in micro-batches (2 of 35: the stages overlap), the long prompt in chunks too
  std::string ids;
  for (int i = 0; i < 70; ++i) ids += (i ? "," : "") + std::to_string((i * 97 + 5) % 768);
  const std::string m = quant_model();
  for (const char* mode : {"batch", "chunked --chunk 40"}) {
    const std::string args = std::string(" logits -t 1 --mode ") + mode + " -m " + m + " --ids " + ids;
    const auto one = logits_of(k3_bin() + args, temp_path("long1.json"));
    expect_same_bits(one, logits_of(mpirun(2, Net::Shm) + args + " --pp 2", temp_path("long2.json")),
                     std::string("70 rows, 2 stages, ") + mode);
    expect_same_bits(one, logits_of(mpirun(3, Net::Shm) + args + " --pp 3", temp_path("long3.json")),
                     std::string("70 rows, 3 stages, ") + mode);
  }
}

TEST(Mpi, GreedyTokensIdentical) {
  const std::string m = quant_model();
  const json one = run_json(k3_bin() + greedy(m));
  ASSERT_EQ(one["ids"].size(), 24u);
  EXPECT_EQ(run_json(mpirun(2, Net::Shm) + greedy(m))["ids"], one["ids"]);
  EXPECT_EQ(run_json(mpirun(3, Net::Tcp) + greedy(m))["ids"], one["ids"]);
  EXPECT_EQ(run_json(mpirun(4, Net::Shm) + greedy(m) + " --pp 2")["ids"], one["ids"]);
  // experts streamed from disk by each process, its rows of each expert (cache of one expert per layer)
  EXPECT_EQ(run_json(mpirun(2, Net::Shm) + greedy(m) + " --expert-cache 1K")["ids"], one["ids"]);
}

// Each process's expert source puts the experts it holds first (ExpertSource::request), so under
// different cache budgets the processes list a step's experts in different orders: the rows they
// exchange must not follow that order. Token by token (one group of experts a step), a process
// that keeps every expert it has read beside one that keeps almost none.
TEST(Mpi, ExpertOrderOfEachProcessIsItsOwn) {
  const std::string m = quant_model(), out = temp_path("eo2.json");
  const std::string args = " logits -t 1 --mode incremental -m " + m + " --ids " + kIds + ",159,72,320,291,542,602,237,751";
  const auto one = logits_of(k3_bin() + args, temp_path("eo1.json"));
  for (const auto& [a, b] : {std::pair("1K", "64M"), std::pair("64M", "1K")}) {
    // one program a process (Open MPI's "A : B"); the leader writes the file
    const std::string cmd = mpiexec() + " --mca pml ob1 --mca btl self,vader -np 1 " + k3_bin() + args +
                            " --expert-cache " + a + " --out " + out + " : -np 1 " + k3_bin() + args + " --expert-cache " + b;
    expect_same_bits(one, logits_of(cmd, out), std::string("expert caches of ") + a + " and " + b);
  }
}

// Processes may hold different experts and budgets (one machine maps every expert, one streams
// them, or two stream with different caches): a pass of several rows computes its experts in
// groups, and the groups, whose rows are exchanged, must be the same on every process whatever it
// holds, and a store whose slots are all kept for experts taken later must still serve them. Each
// MoE path: 12 rows (experts_rows, two passes with --chunk 12), 20 rows (one product per expert),
// each followed by greedy decoding; bit for bit and token for token against one process.
// One MoE layer of 32 experts, 4 a token: a pass of 12 or 20 rows chooses most of them.
std::string one_moe_model() {
  return model("one_moe", "--layers 2 --heads 6 --type q8_0 --expert-type mxfp4 --experts 32 --experts-used 4 --seed 26");
}

// One program a process (Open MPI's "A : B"), each with its own --expert-cache.
std::string two_caches(const std::string& args, const char* a, const char* b, const std::string& lead = "") {
  return mpiexec() + " --mca pml ob1 --mca btl self,vader -np 1 " + k3_bin() + args + lead + " --expert-cache " + a +
         " : -np 1 " + k3_bin() + args + " --expert-cache " + b;
}

TEST(Mpi, ProcessesHoldDifferentExperts) {
  // The least cache (4 slots) holds this layer's experts of the step before when a pass of 20 of
  // them starts, and they are not the lowest ids.
  const std::string m = one_moe_model();
  const std::string out = temp_path("dx2.json");
  const std::string ids12 = kIds, ids20 = ids12 + ",159,72,320,291,542,602,237,751";
  const std::string batch = " logits -t 1 --mode batch -m " + m + " --ids " + ids20;
  const std::string chunked = " logits -t 1 --mode chunked --chunk 12 -m " + m + " --ids " + ids20;
  const auto one_batch = logits_of(k3_bin() + batch, temp_path("dx1b.json"));
  const auto one_chunked = logits_of(k3_bin() + chunked, temp_path("dx1c.json"));
  const std::string gen12 = greedy(m), gen20 = " run -m " + m + " --ids " + ids20 + " -n 8 --temp 0 --ignore-eos --json -t 1";
  const json one12 = run_json(k3_bin() + gen12), one20 = run_json(k3_bin() + gen20);
  // the leader prints the JSON, or writes the file (`lead`: its name; logits_of gives the second
  // process the same)
  const auto two = [](const std::string& args, const char* a, const char* b, const std::string& lead = "") {
    return two_caches(args, a, b, lead);
  };
  for (const auto& [a, b] : {std::pair("1K", "off"), std::pair("off", "1K"), std::pair("64M", "1K")}) {
    const std::string what = std::string("expert caches of ") + a + " and " + b;
    expect_same_bits(one_batch, logits_of(two(batch, a, b, " --out " + out), out), what + ", 20 rows");
    expect_same_bits(one_chunked, logits_of(two(chunked, a, b, " --out " + out), out), what + ", 12 rows then 8");
    EXPECT_EQ(run_json(two(gen12, a, b))["ids"], one12["ids"]) << what << ", 12 rows then decoding";
    EXPECT_EQ(run_json(two(gen20, a, b))["ids"], one20["ids"]) << what << ", 20 rows then decoding";
  }
}

// When every process maps its experts, a pass of a few rows exchanges the experts' hidden rows once
// a MoE layer however many experts its rows choose; when one streams, k experts a group on every
// process. Counted over a 2-row and a 12-row prompt pass (`k3 bench -p P -n 0`, two passes each).
TEST(Mpi, MappedExpertsExchangedOnceAPass) {
  const std::string m = one_moe_model();
  auto messages = [&](int p, const char* a, const char* b) {
    const std::string args = " bench -m " + m + " -p " + std::to_string(p) + " -n 0 -r 1 --membw-mib 0 --json -t 1";
    const json j = run_json(two_caches(args, a, b));
    EXPECT_EQ(j["ranks"].size(), 2u);
    const json& e = j["ranks"][0];
    EXPECT_EQ(e["tokens"].get<int64_t>(), 2 * p);
    return std::llround(e["messages_per_token"].get<double>() * e["tokens"].get<double>());
  };
  const auto mapped = messages(12, "off", "off");
  EXPECT_EQ(mapped, messages(2, "off", "off"));
  EXPECT_GT(messages(12, "off", "1K"), mapped);  // ~25 experts of 32: about 7 groups of 4
}

TEST(Mpi, PerplexityAndChatIdentical) {
  const std::string m = quant_model(), text = temp_path("text.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 400; ++i) f << "the lighthouse keeper watched the sea " << i << ". ";
  }
  const std::string ppl = " perplexity -q -t 1 -c 32 --chunks 3 -m " + m + " -f " + text;
  std::string one, many;
  ASSERT_EQ(run_cmd(k3_bin() + ppl, &one, false), 0) << one;
  ASSERT_EQ(run_cmd(mpirun(3, Net::Shm) + ppl, &many, false), 0) << many;
  EXPECT_NE(one.find("PPL = "), std::string::npos) << one;
  EXPECT_EQ(many, one);
  // k3 chat: the leader reads stdin and writes stdout
  const std::string chat = " chat -t 1 --temp 0 -n 12 -m " + m + " < " + temp_path("chat.in");
  {
    std::ofstream f(temp_path("chat.in"));
    f << "hello there\nand again\n/quit\n";
  }
  ASSERT_EQ(run_cmd(k3_bin() + chat + " --cache-ram 0", &one, false), 0) << one;
  ASSERT_EQ(run_cmd(mpirun(2, Net::Tcp) + chat, &many, false), 0) << many;
  // the replies, without styles (mpirun's stdout is a terminal) and speeds
  auto replies = [](const std::string& s) {
    const std::string plain = std::regex_replace(s, std::regex("\x1B\\[[0-9;]*m"), "");
    return std::regex_replace(plain, std::regex("[0-9.]+ tok/s"), "tok/s");
  };
  EXPECT_NE(replies(one).find("[12 tokens, tok/s"), std::string::npos) << one;
  // the second turn's cached tokens aside (the prompt cache is on under mpirun, off for the one)
  const std::regex counts("prompt ([0-9]+) tokens, [0-9]+ cached");
  EXPECT_EQ(std::regex_replace(replies(many), counts, "prompt $1"), std::regex_replace(replies(one), counts, "prompt $1"));
}

// The reply of each turn, and the "[... prompt P tokens, C cached]" line after it.
struct Turn {
  std::string text;
  int prompt = 0, cached = 0;
};
std::vector<Turn> chat_turns(const std::string& out) {
  const std::string plain = std::regex_replace(out, std::regex("\x1B\\[[0-9;]*m"), "");
  std::vector<Turn> turns;
  const std::regex line(R"(\[[0-9]+ tokens, [0-9.]+ tok/s; prompt ([0-9]+) tokens, ([0-9]+) cached)");
  size_t from = 0;
  for (auto it = std::sregex_iterator(plain.begin(), plain.end(), line); it != std::sregex_iterator(); ++it) {
    turns.push_back({plain.substr(from, it->position() - from), std::stoi((*it)[1]), std::stoi((*it)[2])});
    from = it->position() + it->length();
  }
  return turns;
}

// k3 chat --session and k3 run --prompt-cache under mpirun: every process saves and resumes its
// share (FILE and FILE.rank-R); the resumed turn is served from the file with the one-process
// replies, and a process without its file makes the whole job start afresh.
TEST(Mpi, ChatSessionAndRunPromptCacheAcrossProcesses) {
  const std::string m = quant_model(), in1 = temp_path("s1.in"), in2 = temp_path("s2.in");
  std::ofstream(in1) << "hello there\n/quit\n";
  std::ofstream(in2) << "and again\n/quit\n";
  const std::string chat = " chat -t 1 --temp 0 -n 12 -m " + m;
  std::string replies;  // of the one process
  for (const char* who : {"one", "many"}) {
    const std::string session = temp_path(std::string("session-") + who + ".json");
    fs::remove(session), fs::remove(session + ".rank-1");
    const std::string k3 = std::string(who) == "one" ? k3_bin() : mpirun(2, Net::Shm);
    std::string out1, out2;
    ASSERT_EQ(run_cmd(k3 + chat + " --session " + session + " < " + in1, &out1, false), 0) << out1;
    ASSERT_EQ(run_cmd(k3 + chat + " --session " + session + " < " + in2, &out2, false), 0) << out2;
    EXPECT_EQ(fs::exists(session + ".rank-1"), std::string(who) == "many") << who;
    const auto t1 = chat_turns(out1), t2 = chat_turns(out2);
    ASSERT_EQ(t1.size(), 1u) << out1;
    ASSERT_EQ(t2.size(), 1u) << out2;
    EXPECT_GE(t2[0].cached, t1[0].prompt) << who << ": the resumed turn starts from the session\n" << out2;
    // the replies, with the session file's name (it says where it resumed from) aside
    const std::string both = std::regex_replace(t1[0].text + t2[0].text, std::regex(session), "SESSION");
    if (std::string(who) == "one") replies = both;
    else EXPECT_EQ(both, replies) << "the replies under mpirun";
  }
  // k3 run --prompt-cache: the second run reuses the file, with the tokens of one process without it
  const std::string pc = temp_path("run.k3pc"), args = greedy(m) + " --prompt-cache " + pc;
  fs::remove(pc), fs::remove(pc + ".rank-1"), fs::remove(pc + ".rank-2");
  const json plain = run_json(k3_bin() + greedy(m));
  for (int i = 0; i < 2; ++i) {
    const json j = run_json(mpirun(3, Net::Tcp) + args);
    EXPECT_EQ(j["ids"], plain["ids"]) << "run " << i;
    EXPECT_EQ(j["timings"]["cached_tokens"].get<int>(), i ? 12 : 0) << "run " << i;
  }
  fs::remove(pc + ".rank-2");  // one process cannot restore its share: every process starts afresh
  std::string out;
  ASSERT_EQ(run_cmd(mpirun(3, Net::Tcp) + args, &out), 0) << out;
  EXPECT_NE(out.find("another process of the job could not read its share"), std::string::npos) << out;
  EXPECT_NE(out.find("prompt cache (rank 2): not using"), std::string::npos) << out;
}

// k3 split --tp N [--pp K]: one file per process, each about 1/N of the whole file's tensor bytes
// besides the tensors every process holds whole; under mpirun -m PREFIX (or any one of the files)
// gives the logits of one process on the whole file, bit for bit; a file made for another job is
// refused naming the mismatch.
TEST(Mpi, PerProcessFilesGiveTheWholeFilesLogits) {
  const std::string m = quant_model();
  const auto one = logits_of(k3_bin() + " logits -t 1 -m " + m + " --ids " + kIds, temp_path("one.json"));
  struct Case {
    int tp, pp;
    Net net;
  };
  for (const Case c : {Case{2, 1, Net::Shm}, {3, 1, Net::Tcp}, {2, 2, Net::Shm}}) {
    const int np = c.tp * c.pp;
    const std::string prefix = temp_path("shares-" + std::to_string(c.tp) + "x" + std::to_string(c.pp));
    const json j = run_json(k3_bin() + " split " + m + " " + prefix + " --json --tp " + std::to_string(c.tp) +
                            " --pp " + std::to_string(c.pp));
    ASSERT_EQ(j["files"].size(), static_cast<size_t>(np)) << j.dump();
    const double whole = j["tensor_bytes"].get<double>();
    for (const json& f : j["files"]) {
      EXPECT_TRUE(fs::exists(f["path"].get<std::string>())) << f.dump();
      EXPECT_LE(f["share_bytes"].get<double>(), 1.1 / np * whole) << f.dump();
      EXPECT_EQ(f["tensor_bytes"].get<double>(), f["share_bytes"].get<double>() + f["whole_bytes"].get<double>());
      if (c.tp == 2 && c.pp == 1) {
        EXPECT_LE(f["share_bytes"].get<double>(), 0.55 * whole) << f.dump();
      }
    }
    const std::string pp = " --pp " + std::to_string(c.pp) + " --ids " + kIds;
    const std::string what = "--tp " + std::to_string(c.tp) + " --pp " + std::to_string(c.pp);
    expect_same_bits(one, logits_of(mpirun(np, c.net) + " logits -t 1 -m " + prefix + pp, temp_path("s.json")), what);
    expect_same_bits(one, logits_of(mpirun(np, c.net) + " logits -t 1 -m " + prefix + "-rank1-of-" + std::to_string(np) +
                                        ".gguf" + pp, temp_path("s.json")),
                     what + ", -m one of the files");
  }
  // one token at a time (the decode exchanges) on per-process files
  const std::string two = temp_path("shares-2x1");
  expect_same_bits(logits_of(k3_bin() + " logits -t 1 --mode incremental -m " + m + " --ids " + kIds, temp_path("i1.json")),
                   logits_of(mpirun(2, Net::Tcp) + " logits -t 1 --mode incremental -m " + two + " --ids " + kIds,
                             temp_path("i2.json")),
                   "token by token on per-process files");
  std::string out;
  EXPECT_NE(run_cmd(k3_bin() + " logits -m " + two + "-rank0-of-2.gguf --ids 1,2", &out), 0);
  EXPECT_NE(out.find("holds the share of process 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("mpirun -np 2"), std::string::npos) << out;
  EXPECT_NE(run_cmd(mpirun(3, Net::Shm) + " logits -m " + two + " --ids 1,2", &out), 0);
  EXPECT_NE(out.find("its files are for 2 processes"), std::string::npos) << out;
  const std::string swapped = temp_path("swapped");
  fs::copy_file(two + "-rank1-of-2.gguf", swapped + "-rank0-of-2.gguf", fs::copy_options::overwrite_existing);
  fs::copy_file(two + "-rank0-of-2.gguf", swapped + "-rank1-of-2.gguf", fs::copy_options::overwrite_existing);
  EXPECT_NE(run_cmd(mpirun(2, Net::Shm) + " logits -m " + swapped + " --ids 1,2", &out), 0);
  EXPECT_NE(out.find("holds the share of process 1 of 2; this is process 0 of 2"), std::string::npos) << out;
  const std::string other = temp_path("other-shares");
  ASSERT_EQ(run_cmd(k3_bin() + " split " + f32_model() + " " + other + " --tp 2 -q", &out), 0) << out;
  fs::copy_file(other + "-rank1-of-2.gguf", swapped + "-rank1-of-2.gguf", fs::copy_options::overwrite_existing);
  fs::copy_file(two + "-rank0-of-2.gguf", swapped + "-rank0-of-2.gguf", fs::copy_options::overwrite_existing);
  EXPECT_NE(run_cmd(mpirun(2, Net::Shm) + " logits -m " + swapped + " --ids 1,2", &out), 0);
  EXPECT_NE(out.find("differ in model files"), std::string::npos) << out;
}

// Each process holds its share of the weights: at most 1.25/N of one process's bytes.
TEST(Mpi, EachProcessHoldsItsShare) {
  const std::string m = quant_model();
  const json one = run_json(k3_bin() + greedy(m));
  ASSERT_EQ(one["ranks"].size(), 1u);
  const double whole = one["ranks"][0]["weight_bytes"].get<double>();
  EXPECT_GT(whole, 0);
  for (int np : {2, 3}) {
    const json j = run_json(mpirun(np, Net::Shm) + greedy(m));
    ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(np));
    double sum = 0;
    for (int r = 0; r < np; ++r) {
      const json& e = j["ranks"][r];
      EXPECT_EQ(e["rank"].get<int>(), r);
      EXPECT_FALSE(e["host"].get<std::string>().empty());
      EXPECT_GT(e["rss_bytes"].get<double>(), 0);
      const double w = e["weight_bytes"].get<double>();
      EXPECT_LE(w, 1.25 / np * whole) << "rank " << r << " of " << np;
      sum += w;
    }
    EXPECT_GE(sum, whole);  // every weight somewhere (the replicated vectors on every process)
  }
}

// The exchanges and bytes of a decoded token, counted by the processes, are what the traffic model
// of docs/multinode.md says (bytes up to the embedding row, which depends on the token's owner):
// the heads' outputs and the shared experts' hidden layer travel as Q8_0 blocks (the Q8_0 trunk's
// input format), z and the experts' hidden rows too (MXFP4 experts take Q8_0).
TEST(Mpi, TrafficModelMatchesCountedExchanges) {
  const std::string m = quant_model();
  const auto loaded = model::Model::load(m);
  model::HParams hp = loaded->hparams();
  const multinode::InputFormats formats{GgmlType::Q8_0, GgmlType::Q8_0};
  struct Case {
    int np, pp;
  };
  for (const Case c : {Case{2, 1}, {3, 1}, {4, 2}}) {
    const json j = run_json(mpirun(c.np, Net::Shm) + greedy(m) + " --pp " + std::to_string(c.pp));
    ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(c.np));
    const int tp = c.np / c.pp;
    for (int r = 0; r < c.np; ++r) {
      const json& e = j["ranks"][r];
      const model::Placement p{r % tp, tp, r / tp, c.pp};
      const multinode::Traffic t = multinode::decode_traffic(hp, p, r == 0, formats);
      const multinode::Traffic floats = multinode::decode_traffic(hp, p, r == 0);
      const std::string what = "rank " + std::to_string(r) + " of " + std::to_string(c.np) + " (pp " +
                               std::to_string(c.pp) + ")";
      EXPECT_EQ(e["tokens"].get<double>(), 23) << what;  // the decoded tokens of 24 generated
      EXPECT_DOUBLE_EQ(e["messages_per_token"].get<double>(), t.messages()) << what;
      EXPECT_NEAR(e["bytes_per_token"].get<double>(), t.bytes(), hp.n_embd * 4.0) << what;
      EXPECT_GT(t.messages(), 1) << what;
      if (tp == 2) {  // every share is whole Q8_0 blocks: the counted bytes are below the floats' by more than the spread
        EXPECT_LT(e["bytes_per_token"].get<double>(), floats.bytes() - hp.n_embd * 4.0) << what;
      }
    }
  }
}

TEST(Mpi, MismatchedFilesOrKernelsRefused) {
  const std::string a = f32_model(), b = quant_model(), mp = mpiexec();
  std::string out;
  EXPECT_NE(run_cmd(mp + " -np 1 " + k3_bin() + " logits -m " + a + " --ids 1,2 : -np 1 " + k3_bin() + " logits -m " +
                        b + " --ids 1,2",
                    &out),
            0);
  EXPECT_NE(out.find("differ in model files"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
  // one process on lower kernels (K3_ISA) would compute other bits
  EXPECT_NE(run_cmd(mp + " -np 1 -x K3_ISA=scalar " + k3_bin() + " logits -m " + a + " --ids 1,2 : -np 1 " + k3_bin() +
                        " logits -m " + a + " --ids 1,2",
                    &out),
            0);
  EXPECT_NE(out.find("kernels scalar"), std::string::npos) << out;
  // a file that one process cannot open: the job ends naming it
  EXPECT_NE(run_cmd(mp + " -np 1 " + k3_bin() + " logits -m " + a + " --ids 1,2 : -np 1 " + k3_bin() + " logits -m " +
                        temp_path("missing.gguf") + " --ids 1,2",
                    &out),
            0);
  EXPECT_NE(out.find("error on rank 1 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("missing.gguf"), std::string::npos) << out;
  // commands that write files run as one process
  EXPECT_NE(run_cmd(mp + " -np 2 " + k3_bin() + " make-tiny --out " + temp_path("x.gguf"), &out), 0);
  EXPECT_NE(out.find("runs as one process"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(temp_path("x.gguf")));
}

// Processes of this test's job: those whose environment carries its tag.
std::vector<pid_t> tagged(const std::string& tag) {
  std::vector<pid_t> pids;
  for (const auto& d : fs::directory_iterator("/proc")) {
    const std::string name = d.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(d.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(f)), {});
    if (env.find("K3_TEST_TAG=" + tag + '\0') != std::string::npos) pids.push_back(std::stoi(name));
  }
  return pids;
}

pid_t rank_pid(const std::string& tag, int rank) {
  for (pid_t p : tagged(tag)) {
    std::ifstream f("/proc/" + std::to_string(p) + "/environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(f)), {});
    if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) return p;
  }
  return -1;
}

// Kills rank 1 of 3 in the middle of a generation: every process is gone within 30 s and the
// job's error names the rank.
void kill_one_rank(Net net) {
  const std::string tag = std::to_string(getpid()) + "-" + net_name(net)[0];
  const std::string out = temp_path("kill" + tag + ".out"), err = temp_path("kill" + tag + ".err");
  const std::string cmd = "exec " + mpirun(3, net) + " run -t 1 -m " + quant_model() +
                          " -p hello -n 100000000 --ignore-eos > " + out + " 2> " + err;
  setenv("K3_TEST_TAG", tag.c_str(), 1);
  const pid_t job = fork();
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  unsetenv("K3_TEST_TAG");
  ASSERT_GT(job, 0);
  int status = 0;
  auto end_job = [&] {  // nothing of the job outlives the test, whatever failed
    kill(job, SIGKILL);
    waitpid(job, &status, 0);
    for (pid_t p : tagged(tag)) kill(p, SIGKILL);
  };
  // generating: text arrives (three processes start and load the model first: minutes on a busy machine)
  for (int i = 0; i < 6000 && (!fs::exists(out) || fs::file_size(out) < 64) && waitpid(job, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (!fs::exists(out) || fs::file_size(out) < 64) {
    end_job();
    FAIL() << "no generation started (" << net_name(net) << ")";
  }
  for (int r : {0, 2}) EXPECT_GT(rank_pid(tag, r), 0) << "rank " << r;
  const pid_t victim = rank_pid(tag, 1);
  if (victim <= 0) {
    end_job();
    FAIL() << "no rank 1 found (" << net_name(net) << ")";
  }
  const auto t0 = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  bool ended = false;
  // The deadline is what is tested, set loosely enough for a busy machine (about 1 s when idle).
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    if (!ended && waitpid(job, &status, WNOHANG) == job) ended = true;
    if (ended && tagged(tag).empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool all_gone = ended && tagged(tag).empty();
  if (!ended) end_job();
  for (pid_t p : tagged(tag)) kill(p, SIGKILL);
  EXPECT_TRUE(all_gone) << "still running after " << s << " s (" << net_name(net) << ")";
  EXPECT_LE(s, 30.0);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the job reported success";
  std::ifstream f(err);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
  std::printf("[ %s ] all processes gone %.2f s after rank 1 was killed\n", net_name(net), s);
}

TEST(Mpi, KilledRankEndsEveryProcess) {
  kill_one_rank(Net::Shm);
  kill_one_rank(Net::Tcp);
}

}  // namespace
