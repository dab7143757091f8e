// bench/multinode_plan: the tables of docs/multinode.md. For the released Kimi-K3 (model.md §2) on
// N processes, per decoded token of one sequence: the weight bytes the busiest process reads, the
// exchanges and bytes k3 makes (multinode/traffic.h, the counts tests/multinode checks against real runs),
// and the time they take over common links: bytes / bandwidth + exchanges x latency, next to the
// compute time (weight bytes / memory bandwidth). Then tensor parallel on 4 and 8 machines beside
// the exact layouts with fewer exchanges (modelled here, not built: see the doc).
//
//   bin/multinode_plan [--trunk bf16|q4_K|...] [--experts mxfp4|...] [--mem-gbps 200]
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "multinode/traffic.h"
#include "model/group.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "tensor/kernels.h"
#include "tensor/types.h"

using namespace k3;

namespace {

model::HParams released_k3() {
  model::SynthOptions o;
  o.n_layer = 93, o.n_embd = 7168, o.n_head = 96, o.head_dim = 128, o.d_conv = 4;
  o.q_lora = 1536, o.kv_lora = 512, o.qk_nope = 128, o.qk_rope = 64, o.v_head = 128;
  o.n_expert = 896, o.n_expert_used = 16, o.n_ff_exp = 3072, o.latent = 3584, o.n_shared = 2;
  o.n_ff = 33792, o.n_dense = 1, o.attn_res_block = 12, o.n_vocab = 163840, o.n_ctx = 1048576;
  return model::synth_hparams(o);
}

// Weight bytes one decoded token reads on the process at `p`: its share of every tensor of its
// stage, one embedding row (on average over the vocabulary), k of E experts (with_experts); the
// layer weights in `whole` whole rather than cut.
using Member = model::Tensor model::LayerWeights::*;
double decode_bytes(const model::HParams& hp, const model::Placement& p, GgmlType trunk, GgmlType experts,
                    bool with_experts = true, std::initializer_list<Member> whole = {}) {
  double sum = 0;
  const model::LayerRange layers = model::stage_layers(hp.n_layer, p);
  model::for_each_tensor(hp, [&](const model::TensorRef& r) {
    const bool embd = r.def.global == &model::Weights::token_embd;
    if (r.il != model::kNoLayer ? !layers.has(r.il) : (embd ? p.stage != 0 : p.stage != p.n_stages - 1)) return;
    if (!with_experts && r.def.types == model::TypeRule::Experts) return;
    const GgmlType t = r.def.types == model::TypeRule::KeepF32 || r.def.types == model::TypeRule::Router ? GgmlType::F32
                       : r.def.types == model::TypeRule::Experts ? experts
                                                                 : trunk;
    double bytes = static_cast<double>(row_size(t, r.shape.ne[0])) * r.shape.ne[1] * r.shape.ne[2] * r.shape.ne[3];
    const bool kept = std::find(whole.begin(), whole.end(), r.def.layer) != whole.end();
    if (r.def.cut.kind != model::Cut::Whole && !kept) {
      const int64_t n = r.shape.ne[r.def.cut.axis];
      const int64_t unit = r.def.cut.kind == model::Cut::Heads ? n / hp.n_head[r.il] : 1;
      const int64_t units = n / unit;
      bytes *= static_cast<double>(model::share_begin(units, p.tp_size, p.tp_rank + 1) -
                                   model::share_begin(units, p.tp_size, p.tp_rank)) / static_cast<double>(units);
    }
    if (embd) bytes /= static_cast<double>(r.shape.ne[1]) / p.tp_size;  // one row, held by one process in tp_size
    if (r.def.types == model::TypeRule::Experts) bytes *= static_cast<double>(hp.n_expert_used[r.il]) / hp.n_expert;
    sum += bytes;
  });
  return sum;
}

struct Link {
  const char* name;
  double gbytes_per_s, latency_us;
};

// A way to run it: `machines` machines with `per` processes each (mpirun's default mapping: a
// machine's processes are consecutive ranks), `pp` pipeline stages.
struct Layout {
  const char* what;
  int machines, per, pp;
};

// One decoded token on a layout over a network link (shared memory inside a machine).
struct Cost {
  double machine_bytes = 0;  // weights one machine reads (the busiest)
  double compute_ms = 0;     // the stages in turn, each reading its weights at the machine's bandwidth
  double net_exchanges = 0, net_bytes = 0;
  double comm_ms = 0;
};

Cost cost(const model::HParams& hp, const Layout& lay, const Link& net, const Link& shm, GgmlType trunk,
          GgmlType experts, double mem_gbps) {
  const multinode::InputFormats formats{kernels(trunk).vec_dot_type, kernels(experts).vec_dot_type};
  Cost c;
  const int n = lay.machines * lay.per, tp = n / lay.pp;
  const bool tp_on_net = tp > lay.per;  // a tensor-parallel group spans machines
  for (int s = 0; s < lay.pp; ++s) {
    std::vector<double> machine(lay.machines, 0.0);
    double comm = 0, exch = 0, bytes = 0;
    for (int r = 0; r < tp; ++r) {
      const int rank = s * tp + r;
      const model::Placement p{r, tp, s, lay.pp};
      machine[rank / lay.per] += decode_bytes(hp, p, trunk, experts);
      const multinode::Traffic t = multinode::decode_traffic(hp, p, rank == 0, formats);
      const Link& g = tp_on_net ? net : shm;           // the tensor-parallel group's
      const Link& w = lay.machines > 1 ? net : shm;    // the stages' and the leader's
      const double steps = tp > 1 ? std::ceil(std::log2(tp)) : 0, wsteps = std::ceil(std::log2(n));
      const double ms = t.group * steps * g.latency_us * 1e-3 + t.group_bytes / (g.gbytes_per_s * 1e6) +
                        (t.p2p + t.world * wsteps) * w.latency_us * 1e-3 +
                        (t.p2p_bytes + t.world_bytes) / (w.gbytes_per_s * 1e6);
      if (n > 1) comm = std::max(comm, ms);
      exch = std::max(exch, (tp_on_net ? t.group : 0) + (lay.machines > 1 ? t.p2p + t.world : 0));
      bytes = std::max(bytes, (tp_on_net ? t.group_bytes : 0) + (lay.machines > 1 ? t.p2p_bytes + t.world_bytes : 0));
    }
    double mb = 0;
    for (double b : machine) mb = std::max(mb, b);
    c.machine_bytes = std::max(c.machine_bytes, mb);
    c.compute_ms += mb / (mem_gbps * 1e9) * 1e3;
    c.comm_ms += comm;
    c.net_exchanges += exch;
    c.net_bytes += bytes;
  }
  return c;
}

// The expected number of a token's k experts (distinct, uniform over E) on the busiest of n
// processes that hold E/n whole experts each: the sum over m of P(busiest > m), from the counts'
// multivariate hypergeometric law.
double expected_busiest(int E, int k, int n) {
  const int per = E / n;
  auto choose = [](int a, int b) { return std::exp(std::lgamma(a + 1.0) - std::lgamma(b + 1.0) - std::lgamma(a - b + 1.0)); };
  double e = 0;
  for (int m = 0; m < k; ++m) {
    std::vector<double> ways(k + 1, 0.0);  // selections of j experts from the processes so far, none over m
    ways[0] = 1;
    for (int i = 0; i < n; ++i) {
      std::vector<double> next(k + 1, 0.0);
      for (int j = 0; j <= k; ++j)
        for (int c = 0; c <= std::min(m, per) && j + c <= k; ++c) next[j + c] += ways[j] * choose(per, c);
      ways = std::move(next);
    }
    e += 1 - ways[k] / choose(E, k);
  }
  return e;
}

// Tensor parallel (k3) beside the two exact ways to fewer exchanges, on `machines` machines over
// `net` (modelled, not built: docs/multinode.md, "Exchanges per token"). Whole experts per process:
// each process holds E/N whole experts and computes the selected ones it holds; their outputs (k of
// d_lat floats: the combine in selection order needs them all) replace the gathers of the experts'
// hidden rows and of their combined latent, one exchange less per MoE layer, and the busiest
// process reads its expected busiest count of experts. The last MoE stage replicated: every process
// computes all rows of ffn_routed_up and ffn_down_shexp, so the MoE output needs no gather.
void compare_layouts(const model::HParams& hp, int machines, const std::vector<Link>& nets, GgmlType trunk,
                     GgmlType experts, double mem_gbps) {
  const multinode::InputFormats formats{kernels(trunk).vec_dot_type, kernels(experts).vec_dot_type};
  const model::Placement p0{0, machines, 0, 1};
  const multinode::Traffic t = multinode::decode_traffic(hp, p0, true, formats);
  double trunk_bytes = 0, expert_bytes = 0, busiest = 0, moe = 0, moved_rows = 0, moved_y = 0, moved_out = 0;
  double replicated = 0;
  for (int r = 0; r < machines; ++r) {
    const model::Placement p{r, machines, 0, 1};
    trunk_bytes = std::max(trunk_bytes, decode_bytes(hp, p, trunk, experts, false));
    replicated = std::max(replicated, decode_bytes(hp, p, trunk, experts, true,
                                                   {&model::LayerWeights::routed_up, &model::LayerWeights::down_shexp}));
  }
  const double row_bytes = decode_bytes(hp, p0, trunk, experts) - decode_bytes(hp, p0, trunk, experts, false);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.ffn_kind(il) != model::FfnKind::MoE) continue;
    const int k = static_cast<int>(hp.n_expert_used[il]);
    const double one = 3.0 * static_cast<double>(row_size(experts, hp.d_lat())) * hp.n_ff_exp[il];
    const double b = expected_busiest(static_cast<int>(hp.n_expert), k, machines);
    busiest = std::max(busiest, b);
    expert_bytes += b * one;
    moe += 1;
    // the row layout's two gathers of this layer (rank 0's share of the rows), and the outputs instead
    const int64_t F = hp.n_ff_exp[il], dl = hp.d_lat();
    const GgmlType hf = model::exchange_format(formats.experts, F, 1, machines, 1);
    const int64_t mine_F = model::share_begin(F, machines, 1), mine_dl = model::share_begin(dl, machines, 1);
    moved_rows += k * static_cast<double>(row_size(hf, F) - row_size(hf, mine_F)) + 4.0 * (dl - mine_dl);
    moved_y += (machines - 1.0) / machines * k * dl * 4.0;
    moved_out += 4.0 * (hp.n_embd - model::share_begin(hp.n_embd, machines, 1));
  }
  const double ep_exchanges = t.messages() - moe, ep_bytes = t.bytes() - moved_rows + moved_y;
  const double steps = std::ceil(std::log2(machines));
  struct Row {
    const char* what;
    double weights, exchanges, bytes;
  };
  const Row rows[] = {{"tensor parallel (k3)", trunk_bytes + row_bytes, t.messages(), t.bytes()},
                      {"whole experts per process", trunk_bytes + expert_bytes, ep_exchanges, ep_bytes},
                      {"tensor parallel, MoE output stage replicated", replicated, t.messages() - moe,
                       t.bytes() - moved_out}};
  std::printf("\n%d machines (busiest holds %.2f of a token's %u experts with whole experts):\n\n", machines, busiest,
              hp.n_expert_used.back());
  std::printf("| layout | weights read per machine | compute ms | exchanges | MB |");
  for (const Link& l : nets) std::printf(" %s: comm ms (latency floor), share of the token, tok/s |", l.name);
  std::printf("\n|---|---|---|---|---|");
  for (size_t i = 0; i < nets.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Row& r : rows) {
    const double compute = r.weights / (mem_gbps * 1e9) * 1e3;
    std::printf("| %s | %.1f GB | %.1f | %.0f | %.2f |", r.what, r.weights / 1e9, compute, r.exchanges, r.bytes / 1e6);
    for (const Link& l : nets) {
      const double floor = r.exchanges * steps * l.latency_us * 1e-3, comm = floor + r.bytes / (l.gbytes_per_s * 1e6);
      std::printf(" %.1f (%.1f), %.1f %%, %.2f |", comm, floor, 100 * comm / (compute + comm), 1e3 / (compute + comm));
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  GgmlType trunk = GgmlType::BF16, experts = GgmlType::MXFP4;
  double mem_gbps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const TypeInfo* t = nullptr;
    if (!std::strcmp(argv[i], "--trunk") && (t = type_by_name(argv[i + 1]))) trunk = t->type;
    else if (!std::strcmp(argv[i], "--experts") && (t = type_by_name(argv[i + 1]))) experts = t->type;
    else if (!std::strcmp(argv[i], "--mem-gbps")) mem_gbps = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: multinode_plan [--trunk TYPE] [--experts TYPE] [--mem-gbps GB/s]\n");
      return 2;
    }
  }
  const model::HParams hp = released_k3();
  // Effective MPI figures per message (latency) and per byte (bandwidth): TCP over Ethernet is
  // latency-bound by the kernel stack, RoCE (UCX) is not; shared memory inside a machine.
  const std::vector<Link> nets = {
      {"WAN 1 Gb/s, 1 ms", 0.11, 1000}, {"1 GbE TCP", 0.11, 50}, {"10 GbE TCP", 1.1, 25}, {"25 GbE TCP", 2.8, 15},
      {"100 GbE RoCE", 11.0, 3}};
  const Link shm{"shared memory", 8.0, 1};
  const std::vector<Layout> layouts = {{"one machine", 1, 1, 1},
                                       {"2 machines, tensor parallel", 2, 1, 1},
                                       {"4 machines, tensor parallel", 4, 1, 1},
                                       {"8 machines, tensor parallel", 8, 1, 1},
                                       {"2 machines x 4 processes, tensor parallel 8", 2, 4, 1},
                                       {"2 machines x 4 processes: 2 stages, each tensor parallel inside", 2, 4, 2},
                                       {"8 machines, 8 stages", 8, 1, 8}};
  std::printf("Kimi-K3, trunk %s, experts %s; one sequence decoding; compute: weight bytes / %.0f GB/s per machine\n\n",
              type_info(trunk).name, type_info(experts).name, mem_gbps);
  std::printf("| layout | weights read per token per machine | compute ms | network exchanges | network MB |");
  for (const Link& l : nets) std::printf(" %s: comm ms, tok/s |", l.name);
  std::printf("\n|---|---|---|---|---|");
  for (size_t i = 0; i < nets.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Layout& lay : layouts) {
    const Cost c0 = cost(hp, lay, nets[0], shm, trunk, experts, mem_gbps);
    std::printf("| %s | %.1f GB | %.0f | %.0f | %.2f |", lay.what, c0.machine_bytes / 1e9, c0.compute_ms,
                c0.net_exchanges, c0.net_bytes / 1e6);
    for (const Link& l : nets) {
      const Cost c = cost(hp, lay, l, shm, trunk, experts, mem_gbps);
      std::printf(" %.1f, %.2f |", c.comm_ms, 1e3 / (c.compute_ms + c.comm_ms));
    }
    std::printf("\n");
  }
  const std::vector<Link> lans(nets.begin() + 2, nets.end());
  for (int machines : {4, 8}) compare_layouts(hp, machines, lans, trunk, experts, mem_gbps);
  return 0;
}
