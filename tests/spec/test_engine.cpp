// Speculative decoding in the server's engine: with n-gram drafts and with a DSpark draft, greedy
// requests get exactly the tokens of plain decoding — decoded two at a time (--parallel 2), across
// a prompt-cache restore (the draft's context rows come back with the state), and with experts
// streamed from disk; the responses count drafted and accepted tokens.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "cache/identity.h"
#include "cache/prefix_cache.h"
#include "model/expert_store.h"
#include "server/engine.h"
#include "spec_helpers.h"
#include "tokenizer/tokenizer.h"

using namespace k3;
using namespace k3::test;
using namespace std::chrono_literals;

namespace {

std::vector<int32_t> run_to_end(const std::shared_ptr<server::Task>& t) {
  std::vector<int32_t> ids;
  while (!t->take(ids, 1000ms)) {
  }
  return ids;
}

struct Fixture {
  std::string path;
  std::unique_ptr<model::Model> m;
  std::unique_ptr<tok::Tokenizer> tok;
  std::unique_ptr<spec::DraftModel> draft;
};

const Fixture& fixture() {
  static Fixture* s = [] {
    auto* x = new Fixture;
    model::SynthOptions o = model::synth_preset("tiny");
    o.seed = 41;
    x->path = make_model(o, "eng_tiny");
    x->m = model::Model::load(x->path);
    x->tok = tok::Tokenizer::from_metadata(x->m->meta());
    const std::string d = make_draft(*x->m, "eng_draft", "--taps 1,4,7 --seed 3");
    if (!d.empty()) x->draft = spec::DraftModel::load(d, *x->m, 7);
    return x;
  }();
  return *s;
}

std::vector<server::GenRequest> requests() {
  const char* texts[] = {"The lighthouse keeper walked the lighthouse stairs; the lighthouse keeper",
                         "def f(x):\n    return x + 1\n\ndef f(x):\n    return",
                         "one two three one two three one two", "abc"};
  std::vector<server::GenRequest> r;
  for (const char* t : texts) {
    server::GenRequest g;
    g.prompt = fixture().tok->encode(t, true);
    g.sampling.temp = 0;
    g.max_tokens = 40;
    g.ignore_eos = true;
    r.push_back(g);
  }
  return r;
}

server::EngineOptions opts(int parallel) {
  server::EngineOptions o;
  o.parallel = parallel;
  o.queue = 8;
  o.n_ctx = 256;
  o.n_batch = 16;
  o.threads = 1;
  return o;
}

// Every request of `reqs` submitted at once; their tokens, and the drafts counted.
std::vector<std::vector<int32_t>> run(server::Engine& e, const std::vector<server::GenRequest>& reqs,
                                      int32_t* drafted = nullptr, int32_t* cached = nullptr) {
  std::vector<std::shared_ptr<server::Task>> tasks;
  for (const auto& r : reqs) tasks.push_back(std::make_shared<server::Task>(r));
  EXPECT_EQ(e.submit(tasks), server::Engine::Admit::Ok);
  std::vector<std::vector<int32_t>> out;
  for (const auto& t : tasks) {
    out.push_back(run_to_end(t));
    EXPECT_EQ(t->finish(), server::Finish::Length) << t->error();
    if (drafted) *drafted += t->times().n_draft;
    if (cached) *cached += t->times().n_cached;
  }
  return out;
}

TEST(EngineSpec, GreedyMatchesPlainEverywhere) {
  const Fixture& s = fixture();
  ASSERT_TRUE(s.draft);
  const auto reqs = requests();
  std::vector<std::vector<int32_t>> plain;
  {
    server::Engine e(*s.m, *s.tok, opts(1));
    plain = run(e, reqs);
  }
  for (spec::SpecType type : {spec::SpecType::Ngram, spec::SpecType::Dspark}) {
    const std::string what = spec::spec_type_name(type);
    server::EngineOptions o = opts(2);
    o.spec.type = type;
    o.draft = type == spec::SpecType::Dspark ? s.draft.get() : nullptr;
    // --parallel 2 with a prompt cache: the second round restores every prompt from it
    cache::Options co;
    co.ram_bytes = int64_t{1} << 30;
    co.side_width = o.draft ? o.draft->side_width() : 0;
    co.log = [](cache::Level, const std::string&) {};
    cache::PrefixCache pc(*s.m, "", cache::compute_of(o.f16_rule), co);
    o.cache = &pc;
    server::Engine e(*s.m, *s.tok, o);
    int32_t drafted = 0, cached = 0;
    EXPECT_EQ(run(e, reqs, &drafted), plain) << what;
    EXPECT_EQ(run(e, reqs, &drafted, &cached), plain) << what << " after a prompt-cache restore";
    EXPECT_GT(cached, 0) << what;
    EXPECT_GT(drafted, 0) << what;
    const server::EngineStats st = e.stats();
    EXPECT_EQ(st.spec.drafted, drafted) << what;
    if (type == spec::SpecType::Ngram) {  // (a random draft is rarely right)
      EXPECT_GT(st.spec.accepted, 0) << what;
    }
    EXPECT_EQ(st.spec.emitted + 2 * static_cast<long long>(reqs.size()), st.generated_tokens)
        << what << ": every token but the first of each request came from a step";
  }
  // experts streamed from disk (one expert a layer in the cache), DSpark drafts, two at a time
  model::ExpertStoreOptions so;
  so.quiet = true, so.budget_bytes = 1, so.read_paths = {s.path};
  model::ExpertStore store(*s.m, so);
  server::EngineOptions o = opts(2);
  o.spec.type = spec::SpecType::Dspark;
  o.draft = s.draft.get();
  o.experts = &store;
  server::Engine e(*s.m, *s.tok, o);
  EXPECT_EQ(run(e, reqs), plain) << "--expert-cache";
  EXPECT_GT(store.stats().misses, 0u);
}

}  // namespace
