#include <map>
#include <tuple>

#include "cache/peers.h"
#include "common/error.h"
#include "common/sysmem.h"
#include "multinode/multinode.h"
#include "multinode/share_files.h"
#include "multinode/world.h"
#include "model/registry.h"
#include "tensor/kernels.h"

namespace k3::multinode {

namespace {

// Resident bytes, and of them the file-backed ones (the mapped model), from /proc/self/status.
std::pair<uint64_t, uint64_t> rss_bytes() {
  const std::vector<uint64_t> v = proc_kb_fields("/proc/self/status", {"VmRSS:", "RssFile:"});
  return {v[0], v[1]};
}

#if K3_HAVE_MPI
// Fails on every process when the processes disagree on `value`, naming who has what (`shown`).
void require_same(const char* what, const std::string& value, const std::string& shown, const std::string& hint) {
  World& g = world();
  std::vector<std::string> all, hosts, shown_all;
  if (g.group->same(value, &all)) return;
  g.group->same(g.host, &hosts);
  g.group->same(shown, &shown_all);
  std::string msg = strprintf("the %d processes differ in %s:", g.size, what);
  for (int r = 0; r < g.size; ++r) msg += strprintf(" rank %d (%s) %s;", r, hosts[r].c_str(), shown_all[r].c_str());
  fail("%s %s", msg.c_str(), hint.c_str());
}
#endif

}  // namespace

std::unique_ptr<model::Model> load(const std::string& path, int pp) {
  if (pp < 1) fail("--pp must be >= 1 (got %d)", pp);
#if K3_HAVE_MPI
  if (World& g = world(); g.mpi) {
    g.group = std::make_unique<MpiGroup>(pp);
    const std::string build = strprintf("k3 built %s %s, kernels %s", __DATE__, __TIME__, isa_name(active_isa()));
    require_same("k3 builds and kernels (their results must agree bit for bit)", build, build,
                 "(start every process with the same k3 and K3_ISA on CPUs with the same instruction sets)");
    const std::string mine = share_file_for(path, g.rank, g.size);
    auto m = model::Model::load(mine, g.group.get());
    const std::string fp = model_fingerprint(m->file());
    require_same("model files", fp, mine + " (" + fp + ")",
                 "(every process must open the same model file, or its share of it: k3 split --tp)");
    g.following = true;
    return m;
  }
#endif
  if (pp > 1)
    fail("--pp %d: pipeline stages need several processes (start k3 with mpirun -np N, N a multiple of %d)", pp, pp);
  return model::Model::load(path);
}

int follow(const model::Model& m, const model::RunOptions& base) {
#if K3_HAVE_MPI
  MpiGroup& grp = *world().group;
  std::map<uint64_t, std::unique_ptr<model::State>> states;  // the leader's, by its ids
  // This process's part of the leader's state `id`, made when new (n_ctx > 0) or of another size.
  auto state_of = [&](uint64_t id, int64_t n_ctx) -> model::State& {
    auto& st = states[id];
    if (n_ctx > 0 && (!st || st->n_ctx() != n_ctx)) st = std::make_unique<model::State>(m.new_state(n_ctx));
    if (!st) fail("the leader's state %llu is unknown here", static_cast<unsigned long long>(id));
    return *st;
  };
  std::unique_ptr<cache::Replica> replica;  // this process's share of the leader's prompt cache
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<model::InputRows>> rows;  // per segment, into msg.row_data
  std::vector<model::Segment> batch;
  Message msg;
  model::RunOptions opt = base;
  try {
    for (;;) {
      grp.receive(msg);
      if (msg.op == Op::Quit) return 0;
      if (msg.op == Op::Stats) {
        stats(m);
        continue;
      }
      bool ok = true;
      for (size_t i = 0; i < msg.ops.size();) {
        const auto kind = static_cast<OpKind>(msg.ops[i]);
        const size_t n = static_cast<size_t>(msg.ops[i + 1]);
        const std::span<const int64_t> v(msg.ops.data() + i + 2, n);
        i += 2 + n;
        const uint64_t a = static_cast<uint64_t>(v[0]);
        if (kind == OpKind::DropState) {
          states.erase(a);
        } else if (kind == OpKind::CopyState) {
          const uint64_t b = static_cast<uint64_t>(v[1]);
          if (auto it = states.find(a); it != states.end()) states[b] = std::make_unique<model::State>(*it->second);
          else states.erase(b);  // a copy of a state never run: fresh, made at its first pass
        } else {
          if (!replica) replica = std::make_unique<cache::Replica>(m, grp.world_rank(), state_of);
          ok = replica->apply(v, msg.asked && i == msg.ops.size()) && ok;
        }
      }
      if (msg.op == Op::Cache) {
        grp.answer(ok);
        continue;
      }
      batch.clear();
      logits.resize(std::max(logits.size(), msg.segs.size()));
      rows.assign(msg.segs.size(), {});
      const float* values = msg.row_data.data();
      for (const Message::Rows& r : msg.rows) {
        rows[static_cast<size_t>(r.seg)].push_back({r.at, r.n, values});
        values += r.n * m.hparams().n_embd;
      }
      size_t at = 0;
      for (size_t i = 0; i < msg.segs.size(); ++i) {
        const Message::Seg& s = msg.segs[i];
        auto& st = states[static_cast<uint64_t>(s.id)];
        if (!st || (s.n_past == 0 && st->n_ctx() != s.n_ctx))
          st = std::make_unique<model::State>(m.new_state(s.n_ctx));
        if (st->n_past() != s.n_past) {
          if (s.n_past != 0)
            fail("state %lld is at position %lld here and %lld on the leader (a state changed other than by a "
                 "forward pass, a copy or a reset)",
                 static_cast<long long>(s.id), static_cast<long long>(st->n_past()), static_cast<long long>(s.n_past));
          st->reset();
        }
        batch.push_back({st.get(), msg.ids.data() + at, s.n, static_cast<model::Logits>(s.want), &logits[i], rows[i]});
        at += static_cast<size_t>(s.n);
      }
      opt.f16_rule = static_cast<model::F16Rule>(msg.f16_rule);
      m.forward(batch, opt);
    }
  } catch (const std::exception& e) {
    grp.abort(e.what());
  }
#else
  (void)m, (void)base;
  return 0;
#endif
}

cache::Peers* cache_peers() {
#if K3_HAVE_MPI
  if (World& g = world(); g.mpi && g.rank == 0) return g.group.get();
#endif
  return nullptr;
}

std::vector<RankStats> stats(const model::Model& m) {
  World& g = world();
  RankStats mine;
  mine.rank = g.rank;
  mine.host = g.host;
  mine.weight_bytes = m.weight_bytes();
  std::tie(mine.rss_bytes, mine.rss_file_bytes) = rss_bytes();
#if K3_HAVE_MPI
  if (g.mpi) {
    if (g.rank == 0) g.group->send(Op::Stats);
    const Counters& c = g.group->counters();
    const uint64_t ns = static_cast<uint64_t>(c.seconds * 1e9);
    const std::vector<uint64_t> all = g.group->gather_u64(
        {mine.weight_bytes, mine.rss_bytes, mine.rss_file_bytes, ns, c.messages, c.bytes, c.tokens});
    std::vector<std::string> hosts;
    g.group->same(g.host, &hosts);
    std::vector<RankStats> out;
    for (int r = 0; g.rank == 0 && r < g.size; ++r) {
      const uint64_t* v = all.data() + r * 7;
      out.push_back({r, hosts[r], v[0], v[1], v[2], v[3] / 1e9, v[4], v[5], v[6]});
    }
    return out;
  }
#endif
  return {mine};
}

}  // namespace k3::multinode
