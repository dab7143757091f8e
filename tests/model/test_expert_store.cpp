// Streaming routed experts (model/expert_store.h): logits bit-identical to the mapped path at every
// cache size (down to one expert per MoE layer), with prefetch on and off, both policies, after a
// warmup; counters; a read error names the tensor and offset and leaves the store usable; the
// cache never allocates beyond its budget; the trace replay (k3 cache-sim) against Belady.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/error.h"
#include "helpers.h"
#include "model/cache_policy.h"
#include "model/expert_store.h"

using namespace k3;
using namespace k3::test;

namespace {

// Prefill in chunks of 5 (batches whose experts can outnumber a small cache), then 6 decodes; every
// logit of every row.
std::vector<float> run(const model::Model& m, model::ExpertSource* src, int threads = 1) {
  ThreadPool pool(threads);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  opt.experts = src;
  model::State st = m.new_state(64);
  const auto ids = prompt_ids(17, m.n_vocab(), 5);
  std::vector<float> all, lg;
  m.prefill(st, ids, 5, opt, model::Logits::All, &lg);
  all = lg;
  int32_t id = ids.back();
  for (int i = 0; i < 6; ++i) {
    m.forward(st, &id, 1, opt, model::Logits::Last, &lg);
    all.insert(all.end(), lg.begin(), lg.end());
    id = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

model::SynthOptions many_experts() {  // more experts than the parity configs: more misses
  model::SynthOptions o = config_a(1e-5f);
  o.n_layer = 6, o.n_expert = 16, o.n_expert_used = 4, o.seed = 21;
  o.expert_type = GgmlType::Q4_K;
  o.type = GgmlType::F32;
  o.n_ff_exp = 256, o.latent = 256;  // Q4_K rows
  return o;
}

uint32_t moe_layers(const model::Model& m) {
  uint32_t n = 0;
  for (const auto& l : m.weights().layers) n += static_cast<bool>(l.gate_exps);
  return n;
}

struct Case {
  const char* name;
  model::SynthOptions (*make)();
};
model::SynthOptions mk_a() { return config_a(1e-5f); }
model::SynthOptions mk_b() { return config_b(1e-5f); }
model::SynthOptions mk_c() { return config_c(1e-5f); }
model::SynthOptions mk_d() { return config_d(1e-5f); }
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
const Case kCases[] = {{"a", mk_a}, {"b", mk_b}, {"c", mk_c}, {"d", mk_d}, {"many", many_experts}};

class Streaming : public ::testing::TestWithParam<Case> {};

TEST_P(Streaming, IdenticalAtEveryCacheSizeAndPrefetch) {
  const auto path = make_model(GetParam().make(), std::string("stream_") + GetParam().name);
  auto m = model::Model::load(path);
  const std::vector<float> ref = run(*m, nullptr);
  const uint32_t L = moe_layers(*m), E = m->hparams().n_expert;
  // sizes in experts (0: 1 byte, raised to one expert per MoE layer) x prefetch x policy
  struct Combo {
    uint64_t n_exp;
    bool prefetch;
    const char* policy;
  };
  const uint64_t all = uint64_t(L) * E;
  const Combo combos[] = {{0, false, "freq"},      {0, true, "freq"},    {0, true, "lru"},
                          {L + 1, false, "freq"},  {L + 1, true, "lru"}, {all / 2, true, "freq"},
                          {all / 2, false, "lru"}, {all, true, "freq"}};
  for (const Combo& c : combos) {
    model::ExpertStoreOptions o;
    o.quiet = true, o.prefetch = c.prefetch, o.policy = c.policy, o.io_threads = 3;
    o.io_uring = (&c - combos) % 2 == 0;  // both read engines
    o.budget_bytes = 1;
    const uint64_t slot = model::ExpertStore(*m, o).stats().slot_bytes;
    o.budget_bytes = c.n_exp == 0 ? 1 : c.n_exp * slot;
    model::ExpertStore store(*m, o);
    SCOPED_TRACE(testing::Message() << "experts " << c.n_exp << " prefetch " << c.prefetch << " " << c.policy);
    EXPECT_EQ(store.capacity(),
              c.n_exp == 0 ? int64_t(std::max(L, m->hparams().n_expert_used[L - 1])) : int64_t(c.n_exp));
    EXPECT_TRUE(same_bits(run(*m, &store), ref));
    const model::ExpertStats s = store.stats();
    EXPECT_GT(s.misses, 0u);
    EXPECT_LE(s.allocated_bytes, s.budget_bytes);
    EXPECT_EQ(s.bytes_read % 4096, 0u);
    if (c.prefetch) {
      EXPECT_GT(s.predicted, 0u);
    } else {
      EXPECT_EQ(s.prefetched, 0u);
    }
    if (c.n_exp == all) {  // the same run again: everything is resident now
      EXPECT_TRUE(same_bits(run(*m, &store), ref));
      EXPECT_EQ(store.stats().misses, s.misses);
    }
  }
}

TEST_P(Streaming, WarmupLoadsAndKeepsResultsIdentical) {
  const auto path = make_model(GetParam().make(), std::string("stream_") + GetParam().name);
  auto m = model::Model::load(path);
  const std::vector<float> ref = run(*m, nullptr);
  const std::string trace = temp_path(std::string("trace_") + GetParam().name + ".txt");
  {
    model::ExpertStoreOptions o;
    o.quiet = true, o.trace_path = trace, o.budget_bytes = 1;
    model::ExpertStore rec(*m, o);
    EXPECT_TRUE(same_bits(run(*m, &rec), ref));
  }
  const model::RoutingTrace tr = model::RoutingTrace::load(trace);
  EXPECT_EQ(tr.n_expert, int32_t(m->hparams().n_expert));
  EXPECT_FALSE(tr.groups.empty());
  model::ExpertStoreOptions o;
  o.quiet = true;
  o.budget_bytes = 1;
  const uint64_t slot = model::ExpertStore(*m, o).stats().slot_bytes;
  o.budget_bytes = slot * (moe_layers(*m) * 2 + 3);
  model::ExpertStore store(*m, o);
  const auto w = store.trace_weights(tr);
  const int64_t loaded = store.warmup(w, 0.25);
  int64_t used = 0;
  for (double x : w) used += x > 0;
  EXPECT_EQ(loaded, std::min<int64_t>(used, store.capacity()));
  model::ExpertStats s = store.stats();
  EXPECT_EQ(s.resident, loaded);
  EXPECT_EQ(s.pinned, store.capacity() / 4);
  EXPECT_TRUE(same_bits(run(*m, &store), ref));
  EXPECT_EQ(store.stats().pinned, store.capacity() / 4);  // pinned experts are never evicted
  model::ExpertStore uni(*m, o);
  EXPECT_EQ(uni.warmup({}, 0), uni.capacity());
  EXPECT_TRUE(same_bits(run(*m, &uni), ref));
}

INSTANTIATE_TEST_SUITE_P(Configs, Streaming, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// MXFP4 experts whose rows repack (tensor/repack.h): the mapped stacks repacked at load
// (Model::repack_weights) give the bits of the file's layout, at one thread and two, as the
// streamed ones do; a store cannot be made over stacks repacked in memory.
TEST(ExpertStore, RepackedExpertsGiveTheFileLayoutsBits) {
  model::SynthOptions o = many_experts();
  o.expert_type = GgmlType::MXFP4, o.seed = 23;
  const auto path = make_model(o, "stream_mxfp4_lanes");
  auto m = model::Model::load(path);
  const model::LayerWeights& lw = m->weights().layers.back();
  ASSERT_EQ(lw.up_exps.type, GgmlType::MXFP4);
  const std::vector<float> ref = run(*m, nullptr), ref2 = run(*m, nullptr, 2);
  {
    model::ExpertStoreOptions so;
    so.quiet = true, so.budget_bytes = 1;
    model::ExpertStore store(*m, so);
    EXPECT_TRUE(same_bits(run(*m, &store), ref));
    EXPECT_GT(store.stats().misses, 0u);
  }
  const uint64_t stacks = model::expert_stack_bytes(*m);
  EXPECT_EQ(m->repack_weights(), stacks);
  EXPECT_EQ(m->repack_weights(), 0u) << "once";
  for (const model::Tensor* t : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) EXPECT_EQ(t->type, GgmlType::MXFP4_LANES);
  EXPECT_TRUE(same_bits(run(*m, nullptr), ref));
  EXPECT_TRUE(same_bits(run(*m, nullptr, 2), ref2));
  model::ExpertStoreOptions so;
  so.quiet = true;
  try {
    model::ExpertStore store(*m, so);
    ADD_FAILURE() << "a store over repacked stacks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.ffn_gate_exps.weight was repacked in memory"), std::string::npos) << e.what();
  }
}

// A stack with one block whose scale the lanes layout cannot hold (exponent 1: 2^-127, subnormal
// as f32) keeps the file's layout; the rest of the model is repacked, and the bits do not change.
TEST(ExpertStore, StackWithSubnormalScaleKeepsTheFileLayout) {
  model::SynthOptions o = many_experts();
  o.expert_type = GgmlType::MXFP4, o.seed = 29;
  const auto path = make_model(o, "stream_mxfp4_tiny_scale");
  uint64_t at = 0;
  {
    auto m = model::Model::load(path);
    const model::Tensor& up = m->weights().layers.back().up_exps;
    at = static_cast<uint64_t>(up.data - m->file().files()[0]->base()) + up.info->nbytes / 2 / 17 * 17;
  }
  const std::string tiny = temp_path("stream_mxfp4_tiny_scale_e1.gguf");
  std::filesystem::copy_file(path, tiny, std::filesystem::copy_options::overwrite_existing);
  {
    std::fstream f(tiny, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(1);  // a block's exponent byte: blocks are 17 bytes from the stack's start
  }
  auto m = model::Model::load(tiny);
  const std::vector<float> ref = run(*m, nullptr);
  const model::LayerWeights& lw = m->weights().layers.back();
  EXPECT_EQ(m->repack_weights(), model::expert_stack_bytes(*m) - lw.up_exps.bytes());
  EXPECT_EQ(lw.up_exps.type, GgmlType::MXFP4);
  EXPECT_EQ(lw.gate_exps.type, GgmlType::MXFP4_LANES);
  EXPECT_EQ(lw.down_exps.type, GgmlType::MXFP4_LANES);
  EXPECT_TRUE(same_bits(run(*m, nullptr), ref));
}

TEST(ExpertStore, ReadErrorNamesTensorAndOffsetAndStoreStaysUsable) {
  const auto path = make_model(many_experts(), "stream_err");
  auto m = model::Model::load(path);
  // A copy cut in the middle of the last MoE layer's down stack: its experts past the cut fail.
  const model::Tensor& down = m->weights().layers.back().down_exps;
  ASSERT_TRUE(down);
  const uint64_t cut = static_cast<uint64_t>(down.data - m->file().files()[0]->base()) + down.info->nbytes / 2 + 100;
  const std::string bad = temp_path("stream_err_cut.gguf");
  std::filesystem::copy_file(path, bad, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(bad, cut);
  model::ExpertStoreOptions o;
  o.quiet = true, o.read_paths = {bad};
  o.budget_bytes = 1;
  std::unique_ptr<model::ExpertStore> store;
  for (int attempt = 0; attempt < 4; ++attempt) {  // twice per read engine: the store stays usable
    o.io_uring = attempt < 2;
    if (attempt % 2 == 0) store = std::make_unique<model::ExpertStore>(*m, o);
    try {
      run(*m, store.get());
      FAIL() << "expected a read error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(down.info->name), std::string::npos) << msg;
      EXPECT_NE(msg.find("file offset"), std::string::npos) << msg;
      EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
    }
  }
  // the store still serves a model whose experts are intact
  model::ExpertStoreOptions good = o;
  good.read_paths.clear();
  model::ExpertStore ok(*m, good);
  EXPECT_TRUE(same_bits(run(*m, &ok), run(*m, nullptr)));
}

// Under mpirun every process takes a layer's experts by ascending id, whatever it holds
// (moe.cpp's ExpertLayer): a store whose slots are all kept for experts taken later must still
// serve the others, k at a time, with the file's bytes. Here every slot holds an expert of the
// layer (the lowest ids) before a request of all of them, taken from the highest id down.
TEST(ExpertStore, ServesExpertsInAnotherOrderThanRequested) {
  const auto path = make_model(many_experts(), "stream_order");
  auto m = model::Model::load(path);
  model::ExpertStoreOptions o;
  o.quiet = true, o.prefetch = false, o.budget_bytes = 1;  // the least capacity: one expert per MoE layer
  model::ExpertStore store(*m, o);
  const int32_t E = static_cast<int32_t>(m->hparams().n_expert), cap = static_cast<int32_t>(store.capacity());
  uint32_t il = 0;
  while (!m->weights().layers[il].gate_exps) ++il;
  const int64_t k = m->hparams().n_expert_used[il];
  ASSERT_LT(cap, E);
  const model::LayerWeights& lw = m->weights().layers[il];
  const std::vector<float> x(m->hparams().n_embd, 0.0f);
  auto same = [](const WeightView& a, const WeightView& b) {
    return a.ne1 == b.ne1 && a.nb1 == b.nb1 && std::memcmp(a.data, b.data, a.ne1 * a.nb1) == 0;
  };
  std::vector<int32_t> first(cap);
  std::iota(first.begin(), first.end(), 0);
  store.request(il, first, x.data(), 1);
  for (int32_t e : first) store.acquire(il, e), store.done(il, e);
  store.release(il);
  std::vector<int32_t> all(E);
  std::iota(all.begin(), all.end(), 0);
  store.request(il, all, x.data(), 1);
  EXPECT_EQ(all[0], 0);  // the resident ones first
  for (int32_t g = E; g > 0; g -= static_cast<int32_t>(k)) {
    std::vector<int32_t> group;
    for (int32_t e = g - 1; e >= std::max<int32_t>(0, g - static_cast<int32_t>(k)); --e) {
      const model::ExpertMats mats = store.acquire(il, e);
      EXPECT_TRUE(same(mats.gate, lw.gate_exps.mat(e)) && same(mats.up, lw.up_exps.mat(e)) &&
                  same(mats.down, lw.down_exps.mat(e)))
          << "expert " << e;
      group.push_back(e);
    }
    for (int32_t e : group) store.done(il, e);
  }
  store.release(il);
  EXPECT_LE(store.stats().allocated_bytes, store.stats().budget_bytes);
}

TEST(ExpertStore, ParseSize) {
  EXPECT_EQ(model::parse_size("512"), 512u);
  EXPECT_EQ(model::parse_size("4K"), 4096u);
  EXPECT_EQ(model::parse_size("3M"), 3u << 20);
  EXPECT_EQ(model::parse_size("1.5G"), 3ull << 29);
  EXPECT_THROW(model::parse_size("12X"), Error);
  EXPECT_THROW(model::parse_size("-1G"), Error);
  EXPECT_THROW(model::parse_size(""), Error);
  EXPECT_GT(available_memory(), 0u);
}

// The default of every model command without --expert-cache: stream when the mapped model would
// not fit in the memory available (the 1 GiB cgroup of issue 13: a 1.86 GB model with 1.6 GB of
// experts streams; the same model with 24 GB available does not).
TEST(ExpertStore, AutoStreamDecision) {
  const uint64_t G = 1ull << 30, M = 1ull << 20;
  EXPECT_EQ(model::memory_reserve(G), 256 * M);
  EXPECT_EQ(model::memory_reserve(24 * G), 24 * G / 10);
  const uint64_t file = 1860 * M, experts = 1600 * M, state = 8 * M;
  EXPECT_TRUE(model::auto_stream(file, experts, state, G));
  EXPECT_FALSE(model::auto_stream(file, experts, state, 24 * G));
  // the boundary: file + state + reserve against what is available
  const uint64_t avail = 4 * G, reserve = model::memory_reserve(avail);
  EXPECT_FALSE(model::auto_stream(avail - reserve - state, experts, state, avail));
  EXPECT_TRUE(model::auto_stream(avail - reserve - state + 1, experts, state, avail));
  EXPECT_FALSE(model::auto_stream(file, 0, state, G));  // no experts to stream: the mapping it is
  EXPECT_FALSE(model::auto_stream(file, experts, state, 0));  // nothing readable: keep today's path
}

model::RoutingTrace make_trace(uint32_t L, int32_t E, int k, int tokens, uint64_t seed, bool scans) {
  model::RoutingTrace tr;
  tr.n_layer = L, tr.n_expert = E;
  uint64_t x = seed;
  auto rnd = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  for (int t = 0; t < tokens; ++t)
    for (uint32_t il = 0; il < L; ++il) {
      model::RoutingTrace::Group g{il, {}};
      while (int(g.experts.size()) < k) {
        // a skewed but flat-ish popularity (half the picks from the first quarter), and every 50th
        // token a burst of one-off experts from the tail (a scan)
        const bool scan = scans && t % 50 == 0;
        int32_t e =
            scan ? E - 1 - int32_t(rnd() % (E / 4)) : (rnd() % 2 ? int32_t(rnd() % (E / 4)) : int32_t(rnd() % E));
        if (std::find(g.experts.begin(), g.experts.end(), e) == g.experts.end()) g.experts.push_back(e);
      }
      tr.groups.push_back(g);
    }
  return tr;
}

TEST(CacheSim, BeladyBoundsAndFreqBeatsLruOnSkewedFlatRouting) {
  const model::RoutingTrace tr = make_trace(4, 64, 6, 400, 99, true);
  for (int64_t cap : {24, 64, 128}) {
    const auto lru = model::simulate(tr, "lru", cap), freq = model::simulate(tr, "freq", cap),
               opt = model::simulate(tr, "belady", cap);
    SCOPED_TRACE(cap);
    EXPECT_EQ(lru.hits + lru.misses, 400 * 4 * 6);
    EXPECT_GE(opt.hits, freq.hits);
    EXPECT_GE(opt.hits, lru.hits);
    EXPECT_GT(freq.hit_rate(), lru.hit_rate());
  }
  // everything fits: only compulsory misses
  EXPECT_EQ(model::simulate(tr, "lru", 256).misses, model::simulate(tr, "belady", 256).misses);
}

TEST(CacheSim, BeladyOnAHandWorkedTrace) {
  // One layer, groups of one expert: 0 1 2 0 1 3 0 1. With 3 slots both policies evict 2 for 3:
  // 4 misses. With 2 slots Belady evicts 1 for 2, 2 for 1, 1 for 3: 6 misses; LRU misses all 8.
  model::RoutingTrace tr;
  tr.n_layer = 1, tr.n_expert = 4;
  for (int32_t e : {0, 1, 2, 0, 1, 3, 0, 1}) tr.groups.push_back({0, {e}});
  EXPECT_EQ(model::simulate(tr, "belady", 3).misses, 4);
  EXPECT_EQ(model::simulate(tr, "lru", 3).misses, 4);
  EXPECT_EQ(model::simulate(tr, "belady", 2).misses, 6);
  EXPECT_EQ(model::simulate(tr, "lru", 2).misses, 8);
}

TEST(CacheSim, TraceFileErrors) {
  const std::string p = temp_path("bad_trace.txt");
  std::ofstream(p) << "k3-routing-trace 1 2 8\n0 1 2\n1 9\n";
  try {
    model::RoutingTrace::load(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3: expert 9 out of range"), std::string::npos) << e.what();
  }
}

}  // namespace
