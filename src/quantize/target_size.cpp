#include "quantize/target_size.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <queue>

#include "common/error.h"
#include "model/registry.h"
#include "quantize/fast_kquants.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"
#include "tensor/threadpool.h"

namespace k3::quant {

namespace {

using T = GgmlType;

// The group a sized tensor belongs to: an expert matrix per layer, a layer's attention, shared
// experts or FFN, or a global tensor by its own name.
std::string group_key(const TensorPlan& tp) {
  std::string n = tp.src->name;
  if (n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0) n.resize(n.size() - 7);
  if (n.rfind("blk.", 0) != 0) return n;
  const size_t dot = n.find('.', 4);
  const std::string layer = n.substr(0, dot);
  switch (tp.cls) {
    case TensorClass::Experts: return n;
    case TensorClass::Attention: return layer + ".attn";
    case TensorClass::SharedExperts: return layer + ".shexp";
    default: return layer + ".ffn";
  }
}

// Evenly spaced picks of n out of N (all of them when n >= N).
std::vector<int64_t> spread(int64_t N, int64_t n) {
  std::vector<int64_t> v;
  if (n >= N) {
    v.resize(static_cast<size_t>(N));
    std::iota(v.begin(), v.end(), 0);
  } else {
    for (int64_t i = 0; i < n; ++i) v.push_back((2 * i + 1) * N / (2 * n));
  }
  return v;
}

std::string escape_regex(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) r += '\\';
    r += c;
  }
  return r;
}

// How much of the logits a tensor's relative error reaches, in a linear model of the residual
// stream: the last hidden state is made of 2L + 1 terms (the embedding, then an attention and an
// FFN output per layer), each a 1/(2L + 1) share, and a block passes the relative error of its
// input on to its output (gain 1). A block's matrices: its own term, plus what the blocks after
// it take from it. The embedding: the whole stream at the start, so every block sees its error.
// The LM head: the logits themselves.
double reach(const TensorPlan& tp, double n_layer) {
  const double terms = 2 * n_layer + 1;
  switch (tp.cls) {
    case TensorClass::Output: return terms;
    case TensorClass::Embedding: return 2 * terms - 1;
    default: {
      const std::string& n = tp.src->name;
      const double il = n.rfind("blk.", 0) == 0 ? std::stod(n.substr(4)) : 0;
      const double later = 2 * (n_layer - il) - (tp.cls == TensorClass::Attention ? 1 : 2);  // blocks after this one
      return 1 + later / terms;
    }
  }
}

// Measures every candidate on one tensor: errs[c] for candidates[c] (0 where it is a copy, infinite
// where it cannot be used).
std::vector<double> measure(const TensorPlan& tp, const std::vector<GgmlType>& cands, const Imatrix* im,
                            int64_t sample_rows, ThreadPool& pool) {
  const gguf::TensorInfo& t = *tp.src;
  const int64_t ne0 = t.ne[0], ne1 = t.ne[1], n_mat = t.ne[2] * t.ne[3];
  const ImatrixEntry* ie = im ? im->find(t.name) : nullptr;
  if (ie && (ie->ne0 != ne0 || ie->n_mat != n_mat)) fail("imatrix entry '%s' does not match the tensor", t.name.c_str());

  // Sampled rows and what each stands for: (matrix, row, weight).
  const std::vector<int64_t> mats = spread(n_mat, std::max<int64_t>(1, sample_rows / 8));
  const std::vector<int64_t> rows = spread(ne1, (sample_rows + static_cast<int64_t>(mats.size()) - 1) /
                                                    static_cast<int64_t>(mats.size()));
  double count_sum = 0;
  if (ie) count_sum = std::accumulate(ie->counts.begin(), ie->counts.end(), 0.0);
  struct Pick {
    int64_t mat, row;
    double weight;
  };
  std::vector<Pick> picks;
  std::vector<std::vector<float>> imp(mats.size());
  for (size_t j = 0; j < mats.size(); ++j) {
    const int64_t m = mats[j];
    // An expert counts as often as the router picks it (the imatrix's counts, else equally).
    const double use = tp.cls == TensorClass::Experts && count_sum > 0
                           ? ie->counts[static_cast<size_t>(m)] * static_cast<double>(n_mat) / count_sum
                           : 1.0;
    if (ie) imp[j] = Imatrix::values(*ie, m);
    for (int64_t r : rows) picks.push_back({m, r, use});
  }
  const size_t np = picks.size();

  std::vector<float> x(np * static_cast<size_t>(ne0));
  const size_t in_row = row_size(t.type, ne0);
  const QuantKernels& src_k = kernels(t.type);
  pool.parallel_for(static_cast<int64_t>(np), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i)
      src_k.to_float(t.data + static_cast<size_t>(picks[i].mat * ne1 + picks[i].row) * in_row, x.data() + i * ne0, ne0);
  });
  for (float v : x)
    if (!std::isfinite(v)) fail("tensor '%s' holds non-finite values (inf or NaN); refusing to quantize it", t.name.c_str());

  // The relative error: Σ I·(x − x̂)² over Σ I·x², both over the sampled rows.
  double den = 0;
  for (size_t i = 0; i < np; ++i) {
    const size_t j = static_cast<size_t>(std::find(mats.begin(), mats.end(), picks[i].mat) - mats.begin());
    const float* xi = x.data() + i * ne0;
    double s2 = 0;
    for (int64_t k = 0; k < ne0; ++k) s2 += (ie ? imp[j][k] : 1.0f) * static_cast<double>(xi[k]) * xi[k];
    den += picks[i].weight * s2;
  }
  std::vector<double> row_err(cands.size() * np, 0.0);
  pool.chunks(static_cast<int64_t>(cands.size() * np), 1, [&](int64_t a, int64_t b) {
    std::vector<uint8_t> q;
    std::vector<float> y(static_cast<size_t>(ne0));
    for (int64_t task = a; task < b; ++task) {
      const size_t c = static_cast<size_t>(task) / np, i = static_cast<size_t>(task) % np;
      const GgmlType ty = model::fallback_type(cands[c], ne0);
      if (ty == t.type || (!ie && ref::requires_imatrix(ty))) continue;  // copied: no error; or not available
      const size_t j = static_cast<size_t>(std::find(mats.begin(), mats.end(), picks[i].mat) - mats.begin());
      const float* w = ie ? imp[j].data() : nullptr;
      const float* xi = x.data() + i * ne0;
      q.resize(row_size(ty, ne0));
      quant::quantize_rows(ty, xi, q.data(), 1, ne0, w);
      kernels(ty).to_float(q.data(), y.data(), ne0);
      double e = 0;
      for (int64_t k = 0; k < ne0; ++k) {
        const double d = static_cast<double>(y[k]) - xi[k];
        e += (w ? w[k] : 1.0) * d * d;
      }
      row_err[task] = e;
    }
  });
  std::vector<double> errs(cands.size(), 0.0);
  for (size_t c = 0; c < cands.size(); ++c) {
    for (size_t i = 0; i < np; ++i) errs[c] += picks[i].weight * row_err[c * np + i];
    errs[c] = den > 0 ? errs[c] / den : 0.0;
    // A type ggml quantizes only with importance data is no candidate for a tensor the matrix does
    // not cover (the embedding: no product reads it).
    if (!ie && ref::requires_imatrix(model::fallback_type(cands[c], ne0))) errs[c] = INFINITY;
  }
  return errs;
}

// Keeps the lower convex hull of (bytes, err), by bytes: the only points a marginal choice visits.
void convex_hull(std::vector<SizeCandidate>& cs) {
  std::sort(cs.begin(), cs.end(), [](const SizeCandidate& a, const SizeCandidate& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.err < b.err;
  });
  std::vector<SizeCandidate> h;
  for (const SizeCandidate& c : cs) {
    if (!h.empty() && c.err >= h.back().err) continue;  // dominated: more bytes, no less error
    while (h.size() >= 2) {
      const SizeCandidate &a = h[h.size() - 2], &b = h.back();
      // b lies on or above the line from a to c: drop it
      const double lhs = (a.err - b.err) * static_cast<double>(c.bytes - a.bytes);
      const double rhs = (a.err - c.err) * static_cast<double>(b.bytes - a.bytes);
      if (lhs <= rhs) h.pop_back();
      else break;
    }
    h.push_back(c);
  }
  cs = std::move(h);
}

std::string human(uint64_t b) {
  const double g = static_cast<double>(b) / (1u << 30);
  return g >= 1 ? strprintf("%.2f GiB", g) : strprintf("%.2f MiB", static_cast<double>(b) / (1u << 20));
}

}  // namespace

std::vector<GgmlType> size_candidates(bool have_imatrix, std::vector<GgmlType>* need_imatrix) {
  std::vector<GgmlType> v;
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeInfo* ti = type_info(id);
    if (!ti || !ref::can_quantize(ti->type)) continue;
    const T t = ti->type;
    if (t == T::F32 || t == T::Q4_0 || t == T::Q4_1 || t == T::Q5_0 || t == T::Q5_1 || t == T::IQ4_NL) continue;
    if (ref::requires_imatrix(t) && !have_imatrix) {
      if (need_imatrix) need_imatrix->push_back(t);
      continue;
    }
    v.push_back(t);
  }
  return v;
}

SizedPlan size_plan(const gguf::Model& in, const std::vector<UserRule>& rules, const SizeOptions& opt) {
  const std::string& path = in.files().front()->path();
  const auto arch = in.meta().get_str_opt("general.architecture");
  if (!arch || *arch != model::kArch)
    fail("%s: --target-size sizes '%s' models (this one is '%s')", path.c_str(), model::kArch,
         arch ? arch->c_str() : "(no architecture)");
  const Recipe base = sized_base_recipe();
  SizedPlan sp;
  const Plan plan0 = make_plan(in, base, rules);
  sp.candidates = size_candidates(opt.imatrix != nullptr, &sp.need_imatrix);
  const double n_layer = in.meta().get_u32_or(std::string(model::kArch) + ".block_count", 1);

  // Groups, in plan order.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < plan0.tensors.size(); ++i) {
    const TensorPlan& tp = plan0.tensors[i];
    if (tp.by != TensorPlan::By::Recipe) {
      sp.fixed_bytes += tp.out_bytes;
      continue;
    }
    const std::string key = group_key(tp);
    auto [it, added] = index.emplace(key, sp.groups.size());
    if (added) sp.groups.push_back(SizeGroup{key, {}, {}, 0});
    sp.groups[it->second].tensors.push_back(i);
  }
  uint64_t tensor_bytes = 0;
  size_t n_tensors = 0;
  for (const auto& f : in.files()) {
    for (const auto& t : f->tensors()) tensor_bytes += t.nbytes;
    n_tensors += f->tensors().size();
  }
  uint64_t file_bytes = 0;
  for (const auto& f : in.files()) file_bytes += f->size();
  // The input's header and padding, plus a generous allowance for the keys quantizing adds and
  // for every tensor's alignment padding.
  sp.overhead_bytes = (file_bytes - std::min(file_bytes, tensor_bytes)) + 32 * n_tensors + 4096;

  // Measure: one tensor at a time (its sampled rows decoded once), candidates and rows in parallel.
  ThreadPool pool(std::max(1, opt.threads));
  size_t n_sized = 0, done = 0;
  for (const SizeGroup& g : sp.groups) n_sized += g.tensors.size();
  uint64_t measured = 0;
  const size_t nc = sp.candidates.size();
  for (SizeGroup& g : sp.groups) {
    std::vector<double> err(nc, 0.0);
    std::vector<uint64_t> bytes(nc, 0);
    std::vector<std::vector<GgmlType>> eff(nc);
    for (size_t i : g.tensors) {
      const TensorPlan& tp = plan0.tensors[i];
      std::vector<double> e = measure(tp, sp.candidates, opt.imatrix, opt.sample_rows, pool);
      for (double& v : e) v *= reach(tp, n_layer);
      const gguf::TensorInfo& t = *tp.src;
      for (size_t c = 0; c < nc; ++c) {
        const GgmlType ty = model::fallback_type(sp.candidates[c], t.ne[0]);
        err[c] += e[c];
        bytes[c] += row_size(ty, t.ne[0]) * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
        eff[c].push_back(ty);
      }
      measured += static_cast<uint64_t>(std::min<int64_t>(opt.sample_rows, t.ne[1] * t.ne[2] * t.ne[3]) * t.ne[0]);
      if (opt.progress) opt.progress(++done, n_sized, measured);
    }
    for (size_t c = 0; c < nc; ++c) {
      bool same = false;  // another candidate that gives every tensor the same type
      for (size_t d = 0; d < c && !same; ++d) same = eff[d] == eff[c];
      if (!same && std::isfinite(err[c])) g.candidates.push_back({sp.candidates[c], bytes[c], err[c]});
    }
    convex_hull(g.candidates);
  }

  // Choose: every group at its smallest, then the upgrades that save the most error per byte.
  sp.min_bytes = sp.fixed_bytes + sp.overhead_bytes;
  for (const SizeGroup& g : sp.groups) sp.min_bytes += g.candidates.front().bytes;
  if (sp.min_bytes > opt.target_bytes)
    fail("--target-size %s (%llu bytes) is smaller than the smallest mix, %s (%llu bytes: every sized tensor in its "
         "smallest type, the pinned and F32 tensors as they are)",
         human(opt.target_bytes).c_str(), static_cast<unsigned long long>(opt.target_bytes),
         human(sp.min_bytes).c_str(), static_cast<unsigned long long>(sp.min_bytes));
  uint64_t total = sp.min_bytes;
  auto ratio = [&](size_t gi) {
    const SizeGroup& g = sp.groups[gi];
    const SizeCandidate &a = g.candidates[g.chosen], &b = g.candidates[g.chosen + 1];
    return (a.err - b.err) / static_cast<double>(b.bytes - a.bytes);
  };
  using Step = std::pair<double, size_t>;  // (error saved per byte, -group) : largest first, then the earlier group
  auto cmp = [](const Step& a, const Step& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; };
  std::priority_queue<Step, std::vector<Step>, decltype(cmp)> q(cmp);
  for (size_t gi = 0; gi < sp.groups.size(); ++gi)
    if (sp.groups[gi].candidates.size() > 1) q.push({ratio(gi), gi});
  while (!q.empty()) {
    const size_t gi = q.top().second;
    q.pop();
    SizeGroup& g = sp.groups[gi];
    const uint64_t step = g.candidates[g.chosen + 1].bytes - g.candidates[g.chosen].bytes;
    if (total + step > opt.target_bytes) continue;  // this group stays where it is
    total += step;
    ++g.chosen;
    if (g.chosen + 1 < g.candidates.size()) q.push({ratio(gi), gi});
  }
  // What is left of the budget: the one upgrade (any later candidate of any group) that saves most.
  for (;;) {
    double best = 0;
    size_t bg = 0, bc = 0;
    for (size_t gi = 0; gi < sp.groups.size(); ++gi) {
      const SizeGroup& g = sp.groups[gi];
      for (size_t c = g.chosen + 1; c < g.candidates.size(); ++c) {
        const double saved = g.candidates[g.chosen].err - g.candidates[c].err;
        if (total + (g.candidates[c].bytes - g.candidates[g.chosen].bytes) <= opt.target_bytes && saved > best)
          best = saved, bg = gi, bc = c;
      }
    }
    if (best <= 0) break;
    total += sp.groups[bg].candidates[bc].bytes - sp.groups[bg].candidates[sp.groups[bg].chosen].bytes;
    sp.groups[bg].chosen = bc;
  }

  // The final plan: the user's rules first, then one rule per tensor they leave (the sized ones,
  // and those the recipe's own rules pin), so that the rules alone give the plan again.
  std::vector<GgmlType> want(plan0.tensors.size(), T::F32);
  for (const SizeGroup& g : sp.groups) {
    sp.err += g.candidates[g.chosen].err;
    for (size_t i : g.tensors) want[i] = g.candidates[g.chosen].type;
  }
  sp.rules = rules;
  for (size_t i = 0; i < plan0.tensors.size(); ++i) {
    const TensorPlan& tp = plan0.tensors[i];
    if (tp.by != TensorPlan::By::Recipe && tp.by != TensorPlan::By::RecipeRule) continue;
    const GgmlType ty = tp.by == TensorPlan::By::Recipe ? want[i] : tp.type;
    sp.rules.push_back(parse_rule("^" + escape_regex(tp.src->name) + "$=" + type_name(ty)));
  }
  sp.plan = make_plan(in, base, sp.rules);
  set_mix_file_type(sp.plan);
  sp.file_bytes = sp.plan.out_bytes + sp.overhead_bytes;
  K3_ASSERT(sp.file_bytes == total);
  return sp;
}

std::string rules_text(const SizedPlan& sp, const std::string& input) {
  std::string s = strprintf("# k3 quantize --target-size: %s, predicted %s (%llu bytes), smallest mix %s\n",
                            input.c_str(), human(sp.file_bytes).c_str(),
                            static_cast<unsigned long long>(sp.file_bytes), human(sp.min_bytes).c_str());
  s += "# reuse: k3 quantize IN OUT --tensor-type-file THIS_FILE (a rule for every tensor not kept in F32)\n";
  for (const UserRule& r : sp.rules) s += r.text + "\n";
  return s;
}

std::vector<std::string> read_rules_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("--tensor-type-file: cannot read '%s'", path.c_str());
  std::vector<std::string> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b);
    if (line.find('=') == std::string::npos)
      fail("--tensor-type-file %s, line %d: expected REGEX=TYPE, got '%s'", path.c_str(), n, line.c_str());
    out.push_back(line);
  }
  return out;
}

}  // namespace k3::quant
