// The type matrix: every tensor class of a kimi-k3 file in every type of the contract
// (gguf-contract.md §5, quant-formats.md §9), written by the tests' own independent writer
// (tests/node/make_tiny_kimi_k3.mjs --wide: every row length K3's structure allows is a multiple
// of 256, RMS eps 0.5), run by llama.cpp (tests/model/type_matrix.mjs) and by k3. Per file:
// * where llama.cpp computes it, k3 must load it and agree. Quantized products sum in a different
//   float order per kernel set, in both engines (llama.cpp's AMX kernels for batches, its 256-bit
//   dots for a Q4_1 expert where k3's AVX-512 dot uses 512 bits), and a one-ulp difference can
//   flip an activation's Q8 rounding, which moves later logits by ~1e-2 even here (measured:
//   experts in q4_1 0.014 from one order, 1e-6 from another; mla_proj in q5_1 0.0015..0.0042 from
//   every order). So: the closest pair of one of k3's kernel sets (scalar, AVX2, AVX-512) and one
//   of llama.cpp's two evaluations (prompt in a batch, token by token) differs by at most
//   1e-3 + 4 x the larger of llama.cpp's batch-vs-incremental spread and k3's spread over its
//   kernel sets (the parity tests' rule, with k3's own order sensitivity measured over its ISAs,
//   whose kernels tests/tensor holds to the scalar reference). A real defect moves every order.
// * where llama.cpp refuses it (a load error, or the abort of its CPU backend on an element-wise
//   op or ssm_conv with a non-F32 operand), k3 must refuse it with an error naming a tensor of the
//   class;
// * except for llama.cpp's AMX-buffer defect (model.md §9): on CPUs with AMX it aborts on
//   attn_k_b / attn_v_b in the types its AMX buffer takes, which are valid files; k3 must run them
//   (finite logits) and they are compared on CPUs without AMX.
// A class whose every tensor the type's block does not fit has no such file (the contract forbids
// it); the test prints those.
#include <gtest/gtest.h>

#include <cpuid.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "common/error.h"
#include "helpers.h"
#include "support/cpu_family.h"
#include "support/ggml_cpu_oracle.h"
#include "tensor/kernels.h"

using namespace k3;
using namespace k3::test;

namespace {

struct Class {
  const char* name;
  const char* regex;  // the class's tensors in the writer's 3-layer model (KDA 0-1, MLA 2, dense 0)
  bool elementwise = false;
};

const Class kClasses[] = {
    {"embedding", "^token_embd\\.weight$"},
    {"lm_head", "^output\\.weight$"},
    {"kda_proj", "^blk\\.[01]\\.(attn_[qkv]|ssm_g)\\.weight$"},
    {"kda_gate_beta", "\\.(ssm_f_a|ssm_f_b|ssm_beta)\\.weight$"},
    {"kda_out", "^blk\\.[01]\\.attn_output\\.weight$"},
    {"mla_proj", "\\.(attn_q_a|attn_q_b|attn_kv_a_mqa|attn_gate)\\.weight$|^blk\\.2\\.attn_output\\.weight$"},
    {"mla_kb_vb", "\\.attn_[kv]_b\\.weight$"},
    {"dense_ffn", "\\.ffn_(gate|up|down)\\.weight$"},
    {"router", "\\.ffn_gate_inp\\.weight$"},
    {"experts", "_exps\\.weight$"},
    {"latent", "\\.ffn_routed_(down|up)\\.weight$"},
    {"shared_experts", "_shexp\\.weight$"},
    {"norms", "norm\\.weight$", true},
    {"scores", "_res_score\\.weight$", true},
    {"biases", "\\.(exp_probs_b|ssm_dt)\\.bias$", true},
    {"ssm_a", "\\.ssm_a$", true},
    {"conv", "\\.ssm_conv1d_[qkv]\\.weight$", true},
};

const std::vector<const char*> kTypes = {"f16",  "bf16", "q8_0", "q4_0", "q4_1", "q5_0",   "q5_1",   "q2_k",
                                         "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4", "iq4_nl", "iq4_xs"};
// Element-wise operands (and ssm_conv's kernel) go through one type check in ggml's CPU backend,
// whatever the non-F32 type (all 15 measured on norms: docs/model.md), and each refusal costs a
// llama.cpp process (it aborts): one type per family for those classes.
const std::vector<const char*> kElementwiseTypes = {"f16", "bf16", "q8_0", "q4_k", "mxfp4"};

// llama.cpp's CPU backend places weights in its AMX buffer when the CPU has AMX-INT8 and
// AVX512-VNNI; these are the types it takes there.
bool llama_amx_defect(const Class& c, const std::string& type) {
  unsigned a = 0, b = 0, cx = 0, d = 0;
  const bool amx = __get_cpuid_count(7, 0, &a, &b, &cx, &d) && (d & (1u << 25)) && (cx & (1u << 11));
  static const std::set<std::string> kAmxTypes = {"f16", "q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k", "iq4_xs"};
  return amx && std::string(c.name) == "mla_kb_vb" && kAmxTypes.count(type);
}

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<std::string> unfit;
};

// Runs the plan through type_matrix.mjs, restarting after each case that aborts llama.cpp.
std::map<std::string, Outcome> run_llama(nlohmann::json plan) {
  const std::string script = std::string(std::getenv("K3_SOURCE_DIR") ? std::getenv("K3_SOURCE_DIR")
                                                                      : K3_SOURCE_DIR_FALLBACK) +
                             "/tests/model/type_matrix.mjs";
  llama_harness();  // fails the test when node or node-llama-cpp is missing
  std::map<std::string, Outcome> got;
  const std::string results = temp_path("type_matrix.jsonl");
  std::remove(results.c_str());
  nlohmann::json cases = plan["cases"];
  while (!cases.empty()) {
    plan["cases"] = cases;
    const std::string plan_path = temp_path("type_matrix_plan.json");
    std::ofstream(plan_path) << plan.dump();
    std::string out;
    const int status = run_cmd("GGML_NO_BACKTRACE=1 node " + script + " " + plan_path + " " + results, &out);
    std::ifstream in(results);
    std::string started;
    for (std::string l; std::getline(in, l);) {
      const auto j = nlohmann::json::parse(l);
      if (j.contains("start")) {
        started = j["start"];
        continue;
      }
      Outcome o;
      o.ok = j["ok"];
      if (j.contains("error")) o.error = j["error"];
      o.unfit = j["unfit"].get<std::vector<std::string>>();
      got[j["name"]] = o;
      started.clear();
    }
    if (status == 0) break;
    if (started.empty()) {
      ADD_FAILURE() << "type_matrix.mjs failed before a case started:\n" << out;
      break;
    }
    Outcome o;  // the case in progress aborted llama.cpp
    o.error = "llama.cpp aborted: " + out.substr(out.size() > 300 ? out.size() - 300 : 0);
    got[started] = o;
    nlohmann::json rest = nlohmann::json::array();
    bool after = false;
    for (const auto& c : cases) {
      if (after) rest.push_back(c);
      if (c["name"] == started) after = true;
    }
    cases = rest;
  }
  return got;
}

Rows read_rows(const std::string& path, size_t n, int32_t n_vocab) {
  Rows r;
  r.n_vocab = n_vocab;
  std::ifstream f(path, std::ios::binary);
  for (size_t t = 0; t < n; ++t) {
    std::vector<float> row(n_vocab);
    f.read(reinterpret_cast<char*>(row.data()), sizeof(float) * n_vocab);
    r.rows.push_back(std::move(row));
  }
  if (!f) ADD_FAILURE() << "short logits file " << path;
  return r;
}

// k3 against llama.cpp on one file (type_matrix.mjs wrote llama.cpp's logits, batch and
// incremental): k3 at every kernel set this CPU has, the model loaded and repacked at that level as
// k3's commands do (Q2_K sums in llama.cpp's AVX-512 order there); the closest pair of one of k3's
// sets and one of llama.cpp's two evaluations, and the bound 1e-3 + 4 x the larger spread (the
// header says why); k3's rows at every set for further checks.
struct Agree {
  double best = INFINITY, tol = 0;
  std::vector<Rows> by_isa;  // the last: the best ISA's
  Rows llama_batch;
  std::string line;
};

Agree agree_with_llama(const std::string& file, int32_t n_vocab, const std::vector<int32_t>& ids) {
  Agree a;
  a.llama_batch = read_rows(file + ".batch.logits", ids.size(), n_vocab);
  const Rows li = read_rows(file + ".incremental.logits", ids.size(), n_vocab);
  double k3_spread = 0;
  const double llama_spread = max_abs_diff(a.llama_batch, li);
  std::string per_isa;
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    const std::unique_ptr<model::Model> m = model::Model::load(file);
    m->repack_weights();
    a.by_isa.push_back(k3_logits(*m, ids, 0));
    const double d = std::min(max_abs_diff(a.by_isa.back(), a.llama_batch), max_abs_diff(a.by_isa.back(), li));
    a.best = std::min(a.best, d);
    k3_spread = std::max(k3_spread, max_abs_diff(a.by_isa.back(), a.by_isa.front()));
    per_isa += strprintf(" %s %.2g", isa_name(isa), d);
  }
  set_isa(cpu_best_isa());
  a.tol = 1e-3 + 4 * std::max(llama_spread, k3_spread);
  a.line = strprintf("k3 vs llama.cpp %.3g (%s; spread llama %.2g, k3 %.2g; bound %.3g)", a.best, per_isa.c_str() + 1,
                     llama_spread, k3_spread, a.tol);
  return a;
}

// At every position whose two best llama.cpp batch logits are more than 2 x the bound apart, every
// kernel set of k3 picks llama.cpp's top-1. Returns the near ties skipped.
int expect_same_top1(const Agree& a, const std::string& what) {
  int ties = 0;
  for (size_t t = 0; t < a.llama_batch.rows.size(); ++t) {
    const std::vector<float>& l = a.llama_batch.rows[t];
    std::vector<float> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] <= 2 * a.tol) {
      ++ties;
      continue;
    }
    const size_t top = std::max_element(l.begin(), l.end()) - l.begin();
    for (const Rows& k : a.by_isa) {
      const size_t mine = std::max_element(k.rows[t].begin(), k.rows[t].end()) - k.rows[t].begin();
      EXPECT_EQ(top, mine) << what << ": position " << t << ": llama.cpp's top-1 " << top << " (margin "
                           << sorted[0] - sorted[1] << "), k3's " << mine;
    }
  }
  return ties;
}

class TypeMatrix : public ::testing::TestWithParam<Class> {};

TEST_P(TypeMatrix, K3AgreesWithLlamaCpp) {
  const Class& cls = GetParam();
  const std::vector<int32_t> ids = {1, 72, 101, 260, 33, 7, 119, 200, 42, 3, 88, 150};
  nlohmann::json plan = {{"ids", ids}, {"eps", 0.5}, {"cases", nlohmann::json::array()}};
  for (const char* t : cls.elementwise ? kElementwiseTypes : kTypes)
    plan["cases"].push_back({{"name", t},
                             {"file", temp_path(std::string(cls.name) + "_" + t + ".gguf")},
                             {"tensorTypes", nlohmann::json::array({nlohmann::json::array({cls.regex, t})})}});
  const auto llama = run_llama(plan);
  const std::regex re(cls.regex);
  int ran = 0, refused = 0, amx = 0;
  for (const auto& c : plan["cases"]) {
    const std::string type = c["name"], file = c["file"];
    auto it = llama.find(type);
    ASSERT_NE(it, llama.end()) << cls.name << " " << type << ": no llama.cpp result";
    const Outcome& ll = it->second;
    std::unique_ptr<model::Model> m;
    std::string k3_error;
    try {
      m = model::Model::load(file);
    } catch (const Error& e) {
      k3_error = e.what();
    }
    size_t n_class = 0;  // the class's tensors; the writer left those the type does not fit in f32
    gguf::Model g = gguf::Model::open(file);
    for (const gguf::TensorInfo* ti : g.tensors()) n_class += std::regex_search(ti->name, re);
    if (ll.unfit.size() == n_class) {
      std::printf("[types] %-14s %-6s not representable (block does not divide ne0)\n", cls.name, type.c_str());
      continue;
    }
    if (!ll.ok && llama_amx_defect(cls, type)) {
      ++amx;
      ASSERT_TRUE(m) << cls.name << " " << type << ": k3 refuses a valid file: " << k3_error;
      const Rows kr = k3_logits(*m, ids, 0);
      EXPECT_TRUE(std::isfinite(max_abs(kr))) << cls.name << " " << type;
      std::printf("[types] %-14s %-6s llama.cpp's AMX buffer cannot run it; k3 does (|logits| <= %.3g)\n", cls.name,
                  type.c_str(), max_abs(kr));
      continue;
    }
    if (!ll.ok) {
      ++refused;
      EXPECT_FALSE(m) << cls.name << " " << type << ": llama.cpp refuses the file but k3 loads it; llama.cpp: "
                      << ll.error;
      if (!m) {
        // the message names a tensor of the class
        std::smatch sm;
        const std::regex quoted("'([^']+)'");
        EXPECT_TRUE(std::regex_search(k3_error, sm, quoted) && std::regex_search(sm[1].str(), re))
            << cls.name << " " << type << ": k3's error does not name a tensor of the class: " << k3_error;
      }
      std::printf("[types] %-14s %-6s both refuse; k3: %s\n", cls.name, type.c_str(), k3_error.c_str());
      continue;
    }
    ++ran;
    ASSERT_TRUE(m) << cls.name << " " << type << ": llama.cpp runs the file but k3 refuses it: " << k3_error;
    const Agree a = agree_with_llama(file, m->n_vocab(), ids);
    const int ties = expect_same_top1(a, std::string(cls.name) + " " + type);
    std::printf("[types] %-14s %-6s both run; %s; %d near ties\n", cls.name, type.c_str(), a.line.c_str(), ties);
    EXPECT_LE(a.best, a.tol) << cls.name << " " << type;
  }
  std::printf("[types] %s: %d types computed by both, %d refused by both, %d run by k3 only (llama.cpp's AMX defect); %s\n",
              cls.name, ran, refused, amx, cpu_family().c_str());
}

INSTANTIATE_TEST_SUITE_P(Classes, TypeMatrix, ::testing::ValuesIn(kClasses),
                         [](const auto& info) { return std::string(info.param.name); });


// ---- files as llama.cpp's tools write them -------------------------------------------------------
//
// The same model in F32, its tensors quantized by ggml's own ggml_quantize_chunk (with a synthetic
// importance matrix) and written by gguf-py (tests/node/ggml_gguf.py): each type on the routed
// experts and, where its line says so, on every matrix of the trunk whose row length the block
// divides (the rest stay F32). One line a type. k3 must load the file and agree with llama.cpp on it within the
// bound above, pick llama.cpp's top-1 token at every position that is not a near tie (the top two
// of llama.cpp's logits within 2 x the bound), and give the same bits when the experts stream from
// disk (k3 logits --expert-cache 1: one expert in memory at a time) as when they are mapped.
struct GgmlCase {
  const char* type;
  bool trunk;  // also on the trunk
};
const GgmlCase kGgmlTypes[] = {
    {"q1_0", true}, {"q2_0", true}, {"tq1_0", true}, {"tq2_0", true}, {"nvfp4", true}, {"iq3_xxs", true}, {"iq3_s", true},
    {"iq2_xxs", true},
    {"iq2_xs", false},
    {"iq2_s", false},
    {"iq1_s", true},
    {"iq1_m", false},
};

const char* kTrunk =
    "^(token_embd|output)\\.weight$|\\.(attn_[qkv]|ssm_g|ssm_f_a|ssm_f_b|ssm_beta|attn_output|attn_q_a|attn_q_b|"
    "attn_kv_a_mqa|attn_gate|attn_k_b|attn_v_b|ffn_gate|ffn_up|ffn_down|ffn_routed_down|ffn_routed_up|"
    "ffn_gate_shexp|ffn_up_shexp|ffn_down_shexp)\\.weight$";

std::string k3_bin() {
  const char* d = std::getenv("K3_BIN_DIR");
  return std::string(d ? d : K3_BIN_DIR_FALLBACK) + "/k3";
}

std::string k3_logits_cli(const std::string& file, const std::string& ids, const std::string& flags) {
  const std::string out = file + ".k3" + std::to_string(std::hash<std::string>{}(flags)) + ".json";
  std::string log;
  EXPECT_EQ(run_cmd(k3_bin() + " logits -t 1 -m " + file + " --ids " + ids + " " + flags + " --out " + out, &log), 0) << log;
  std::ifstream f(out);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class TypeMatrixGgml : public ::testing::TestWithParam<GgmlCase> {};

TEST_P(TypeMatrixGgml, K3AgreesWithLlamaCppOnGgmlFiles) {
  const GgmlCase& gt = GetParam();
  const std::vector<int32_t> ids = {1, 72, 101, 260, 33, 7, 119, 200, 42, 3, 88, 150};
  std::string ids_csv;
  for (int32_t i : ids) ids_csv += (ids_csv.empty() ? "" : ",") + std::to_string(i);
  nlohmann::json plan = {{"ids", ids}, {"eps", 0.5}, {"cases", nlohmann::json::array()}};
  for (const auto& [where, regex] : {std::pair{"experts", "_exps\\.weight$"}, std::pair{"trunk", kTrunk}}) {
    if (std::string(where) == "trunk" && !gt.trunk) continue;
    plan["cases"].push_back({{"name", where},
                             {"file", temp_path(std::string("ggml_") + gt.type + "_" + where + ".gguf")},
                             {"writer", "ggml"},
                             {"tensorTypes", nlohmann::json::array({nlohmann::json::array({regex, gt.type})})}});
  }
  const auto llama = run_llama(plan);
  for (const auto& c : plan["cases"]) {
    const std::string where = c["name"], file = c["file"];
    const std::string what = std::string(gt.type) + " on the " + where;
    auto it = llama.find(where);
    ASSERT_NE(it, llama.end()) << what << ": no llama.cpp result";
    ASSERT_TRUE(it->second.ok) << what << ": llama.cpp cannot run ggml's file: " << it->second.error;
    size_t n_typed = 0;
    const gguf::Model g = gguf::Model::open(file);
    for (const gguf::TensorInfo* ti : g.tensors()) n_typed += std::string(type_name(ti->type)) == gt.type;
    ASSERT_GT(n_typed, 0u) << what << ": the file holds no tensor of the type";
    std::unique_ptr<model::Model> m;
    try {
      m = model::Model::load(file);
    } catch (const Error& e) {
      FAIL() << what << ": k3 refuses the file: " << e.what();
    }
    const Agree a = agree_with_llama(file, m->n_vocab(), ids);
    EXPECT_LE(a.best, a.tol) << what;
    const int ties = expect_same_top1(a, what);
    EXPECT_EQ(k3_logits_cli(file, ids_csv, "--expert-cache off"), k3_logits_cli(file, ids_csv, "--expert-cache 1"))
        << what << ": streamed experts give other logits than mapped ones";
    std::printf("[ggml] %-8s %-7s %zu tensors; %s; top-1 checked at %zu of %zu positions (near ties %d); streamed == mapped\n",
                gt.type, where.c_str(), n_typed, a.line.c_str(), ids.size() - ties, ids.size(), ties);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TypeMatrixGgml, ::testing::ValuesIn(kGgmlTypes),
                         [](const auto& info) { return std::string(info.param.type); });

// A file whose every computation k3 does in llama.cpp's order (tensor/ and docs/model.md, "Summation
// order"): Q5_0 matrices (not a type llama.cpp's AMX or repack buffers take) quantized by ggml and
// written by gguf-py, the rest F32 (router, norms, KDA, attention residuals, MLA's softmax). At the level of the
// vector width of the llama.cpp build this CPU runs (AVX-512 or AVX2), k3's logits are llama.cpp's
// token-by-token logits to the bit at every position.
TEST(TypeMatrixGgmlBits, Q5_0FileGivesLlamaCppsBits) {
  const test::GgmlCpu* g = test::GgmlCpu::get();
  ASSERT_TRUE(g) << "ggml CPU backend (node-llama-cpp's libggml-cpu) not found: run tools/setup test";
  std::vector<int32_t> ids;  // 40 positions: attention rows past both vector widths
  for (int32_t i = 0; i < 40; ++i) ids.push_back(1 + (37 * i + 11) % 250);
  const std::string file = temp_path("ggml_q5_0_bits.gguf");
  nlohmann::json plan = {{"ids", ids}, {"eps", 0.5}, {"cases", nlohmann::json::array()}};
  plan["cases"].push_back({{"name", "q5_0"}, {"file", file}, {"writer", "ggml"},
                           {"tensorTypes", nlohmann::json::array({nlohmann::json::array({"_exps\\.weight$", "q5_0"}),
                                                                   nlohmann::json::array({kTrunk, "q5_0"})})}});
  const auto llama = run_llama(plan);
  ASSERT_TRUE(llama.count("q5_0") && llama.at("q5_0").ok) << "llama.cpp did not run the file";
  const Isa level = g->avx512() ? Isa::Avx512 : Isa::Avx2;
  set_isa(level);
  const std::unique_ptr<model::Model> m = model::Model::load(file);
  m->repack_weights();
  const Rows k3 = k3_logits(*m, ids, 0);
  set_isa(cpu_best_isa());
  const Rows li = read_rows(file + ".incremental.logits", ids.size(), m->n_vocab());
  const Rows lb = read_rows(file + ".batch.logits", ids.size(), m->n_vocab());
  int same = 0;
  for (size_t t = 0; t < ids.size(); ++t) same += k3.rows[t] == li.rows[t];
  EXPECT_EQ(same, static_cast<int>(ids.size())) << "k3 at " << isa_name(level) << " vs llama.cpp (" << g->variant()
                                                << "): " << max_abs_diff(k3, li);
  std::printf("[ggml] q5_0 file, k3 at %s vs llama.cpp %s token by token: %d of %zu positions bit-identical (max "
              "|diff| %.2g; llama.cpp's batch vs token by token %.2g) on %s\n",
              isa_name(level), g->variant().c_str(), same, ids.size(), max_abs_diff(k3, li), max_abs_diff(lb, li),
              cpu_family().c_str());
}

}  // namespace
