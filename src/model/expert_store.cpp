#include "model/expert_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "common/error.h"
#include "tensor/matvec.h"
#include "model/ops.h"
#include "tensor/kernels.h"

namespace k3::model {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double mul = 1;
  std::string suf(end ? end : "");
  if (suf == "K" || suf == "k" || suf == "KiB")
    mul = 1024.0;
  else if (suf == "M" || suf == "m" || suf == "MiB")
    mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "g" || suf == "GiB")
    mul = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "t" || suf == "TiB")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else if (!suf.empty())
    fail("'%s' is not a size (a number with an optional K, M, G or T suffix)", s.c_str());
  if (s.empty() || end == s.c_str() || !(v > 0) || !std::isfinite(v))
    fail("'%s' is not a size (a positive number with an optional K, M, G or T suffix)", s.c_str());
  return static_cast<uint64_t>(v * mul);
}

uint64_t expert_stack_bytes(const Model& m) {
  uint64_t n = 0;
  for (const auto& l : m.weights().layers)
    for (const Tensor* t : {&l.gate_exps, &l.up_exps, &l.down_exps})
      if (*t) n += t->bytes();
  return n;
}

uint64_t file_bytes(const Model& m) {
  uint64_t n = 0;
  for (const auto& f : m.file().files()) n += f->size();
  return n;
}

uint64_t memory_reserve(uint64_t available) { return std::max<uint64_t>(256ull << 20, available / 10); }

uint64_t auto_expert_budget(const Model& m, uint64_t state_bytes, int sharing) {
  const uint64_t trunk = m.weight_bytes() - expert_stack_bytes(m);
  const uint64_t avail = available_memory() / static_cast<uint64_t>(std::max(1, sharing));
  const uint64_t need = trunk + state_bytes + memory_reserve(avail);
  return avail > need ? avail - need : 0;
}

bool auto_stream(uint64_t file_bytes, uint64_t expert_bytes, uint64_t state_bytes, uint64_t available) {
  return expert_bytes > 0 && available > 0 && file_bytes + state_bytes + memory_reserve(available) > available;
}

ExpertStore::ExpertStore(const Model& m, const ExpertStoreOptions& o) : m_(m), o_(o) {
  const HParams& hp = m.hparams();
  E_ = static_cast<int32_t>(hp.n_expert);
  seg_.resize(hp.n_layer);
  uint64_t seg_cap[3] = {0, 0, 0};
  uint32_t n_moe = 0, max_k = 1;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& lw = m.weights().layers[il];
    if (!lw.gate_exps) continue;
    ++n_moe;
    max_k = std::max(max_k, hp.n_expert_used[il]);
    const Tensor* ts[3] = {&lw.gate_exps, &lw.up_exps, &lw.down_exps};
    for (int p = 0; p < 3; ++p) {
      Segment& s = seg_[il][p];
      const Tensor& t = *ts[p];
      if (t.type != t.info->type)
        fail("expert store: %s was repacked in memory (Model::repack_weights); streaming reads the file",
             t.info->name.c_str());
      s.info = t.info;
      s.file = t.info->file_index;
      s.offset = static_cast<uint64_t>(t.data - m.file().files()[s.file]->base());
      s.row_bytes = t.row_bytes();
      s.ne0 = t.ne[0], s.ne1 = t.ne[1], s.type = t.type;
      s.bytes = static_cast<uint64_t>(t.ne[1]) * s.row_bytes;
      s.stride = t.mat_stride();
      // an unaligned slice spans at most one extra block
      seg_cap[p] = std::max(seg_cap[p], round_up(s.bytes, kIoAlign) + kIoAlign);
      // the stacks are never read through the mapping: no readahead into them, drop stray pages
      const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      const uintptr_t a = round_up(reinterpret_cast<uintptr_t>(t.info->data), page);
      const uintptr_t b = (reinterpret_cast<uintptr_t>(t.info->data) + t.info->nbytes) / page * page;
      if (b > a) {
        madvise(reinterpret_cast<void*>(a), b - a, MADV_RANDOM);
        madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
      }
    }
  }
  if (n_moe == 0) fail("%s: the model has no routed experts to stream", m.file().files()[0]->path().c_str());
  slot_bytes_ = seg_cap[0] + seg_cap[1] + seg_cap[2];
  budget_ = o.budget_bytes;
  if (budget_ == 0) budget_ = auto_expert_budget(m, 0);
  int64_t cap = static_cast<int64_t>(budget_ / slot_bytes_);
  const int64_t min_cap = std::max<int64_t>(n_moe, max_k);
  if (cap < min_cap) {
    if (!o.quiet)
      std::fprintf(stderr,
                   "k3: expert cache of %.1f MiB is below one expert per MoE layer; raised to %lld experts "
                   "(%.1f MiB)\n",
                   budget_ / 1048576.0, static_cast<long long>(min_cap), min_cap * slot_bytes_ / 1048576.0);
    cap = min_cap;
    budget_ = static_cast<uint64_t>(cap) * slot_bytes_;
  }
  cap = std::min<int64_t>(cap, static_cast<int64_t>(n_moe) * E_);
  slots_.resize(static_cast<size_t>(cap));
  for (int32_t s = static_cast<int32_t>(cap); s-- > 0;) free_.push_back(s);
  where_.assign(static_cast<size_t>(hp.n_layer) * E_, -1);
  predicted_.resize(hp.n_layer);
  policy_ = make_policy(o.policy, hp.n_layer, E_, o.half_life);
  std::vector<std::string> paths = o.read_paths;
  if (paths.empty())
    for (const auto& f : m.file().files()) paths.push_back(f->path());
  if (paths.size() != m.file().files().size())
    fail("expert store: %zu read paths for %zu model files", paths.size(), m.file().files().size());
  reader_ = std::make_unique<ExpertReader>(paths, o.io_threads, o.io_uring,
                                           [this](const ReadJob& j, const std::string& err) { on_read(j, err); });
  if (!o.trace_path.empty()) {
    trace_.open(o.trace_path);
    if (!trace_) fail("%s: cannot write the routing trace", o.trace_path.c_str());
    trace_ << "k3-routing-trace 1 " << hp.n_layer << ' ' << E_ << '\n';
  }
}

ExpertStore::~ExpertStore() {
  reader_.reset();  // joins the readers: no completion runs after this
  for (auto& s : slots_) std::free(s.buf);
}

int32_t ExpertStore::alloc_locked() {
  if (!free_.empty()) {
    const int32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  int32_t victim = -1;
  double best = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.st != Slot::St::Ready || s.pins > 0 || s.permanent) continue;
    const double p = policy_->priority(s.key);
    if (victim < 0 || p < best) victim = static_cast<int32_t>(i), best = p;
  }
  if (victim >= 0) {
    where_[slots_[victim].key] = -1;
    slots_[victim].key = -1;
    slots_[victim].st = Slot::St::Free;
    slots_[victim].prefetched = false;
  }
  return victim;
}

bool ExpertStore::unpin_unused_locked() {
  // the expert with the highest id: under mpirun the caller takes a layer's experts by ascending id
  auto best = cur_pins_.end();
  for (auto it = cur_pins_.begin(); it != cur_pins_.end(); ++it) {
    const Slot& x = slots_[*it];
    if (x.held || x.permanent || x.st == Slot::St::Loading) continue;
    if (best == cur_pins_.end() || x.key % E_ > slots_[*best].key % E_) best = it;
  }
  if (best == cur_pins_.end()) return false;
  const int32_t s = *best;
  cur_pins_.erase(best);
  pending_.push_back(slots_[s].key % E_);  // read again when acquired (a waiting expert is never resident)
  --slots_[s].pins;
  free_locked(s);
  return true;
}

void ExpertStore::free_locked(int32_t s) {
  Slot& sl = slots_[s];
  if (sl.key >= 0) where_[sl.key] = -1;
  sl.key = -1;
  sl.st = Slot::St::Free;
  sl.prefetched = sl.permanent = false;
  sl.error.clear();
  free_.push_back(s);
}

void ExpertStore::load_locked(int32_t s, int32_t key, std::vector<ReadJob>& jobs) {
  Slot& sl = slots_[s];
  if (!sl.buf) {
    sl.buf = static_cast<uint8_t*>(std::aligned_alloc(kIoAlign, slot_bytes_));
    if (!sl.buf) fail("expert cache: cannot allocate %llu bytes", static_cast<unsigned long long>(slot_bytes_));
    st_.allocated_bytes += slot_bytes_;
  }
  sl.key = key;
  sl.st = Slot::St::Loading;
  sl.parts_left = 3;
  sl.error.clear();
  where_[key] = s;
  const uint32_t il = static_cast<uint32_t>(key / E_);
  const int64_t e = key % E_;
  size_t at = 0;
  for (int p = 0; p < 3; ++p) {
    const Segment& g = seg_[il][p];
    const uint64_t off = g.offset + static_cast<uint64_t>(e) * g.stride;
    const uint64_t start = off / kIoAlign * kIoAlign;
    sl.pad[p] = off - start;
    sl.seg_at[p] = at;
    ReadJob j;
    j.file = g.file;
    j.offset = start;
    j.need = sl.pad[p] + g.bytes;
    j.len = round_up(j.need, kIoAlign);
    j.dst = sl.buf + at;
    j.tag = s, j.part = p;
    jobs.push_back(j);
    at += j.len;
  }
}

void ExpertStore::on_read(const ReadJob& j, const std::string& err) {
  std::lock_guard<std::mutex> lk(mu_);
  Slot& sl = slots_[j.tag];
  if (!err.empty() && sl.error.empty()) {
    const uint32_t il = static_cast<uint32_t>(sl.key / E_);
    const Segment& g = seg_[il][j.part];
    sl.error = strprintf("reading expert %d of tensor %s (file offset %llu, %llu bytes) failed: %s", sl.key % E_,
                         g.info->name.c_str(), static_cast<unsigned long long>(g.offset + (sl.key % E_) * g.stride),
                         static_cast<unsigned long long>(g.bytes), err.c_str());
  }
  if (--sl.parts_left > 0) return;
  sl.st = sl.error.empty() ? Slot::St::Ready : Slot::St::Failed;
  if (sl.st == Slot::St::Failed && sl.pins == 0) free_locked(j.tag);  // a failed prefetch: forget it
  cv_.notify_all();
}

void ExpertStore::predict(uint32_t il, const float* x, int64_t T) {
  const HParams& hp = m_.hparams();
  const LayerWeights& lw = m_.weights().layers[il];
  const int64_t H = hp.n_embd, k = hp.n_expert_used[il];
  // The whole router from the file, also where this process holds a share of it: a hint needs
  // no exchange with the others.
  const Tensor& R = lw.gate_inp;  // any type (registry: TypeRule::Router)
  const size_t r_row = row_size(R.type, H);
  const float* bias = lw.exp_probs_b.f32();
  const auto dot = kernels(R.type).vec_dot;  // SIMD: this runs on the decode path
  std::vector<float>& p = pred_p_;
  std::vector<int32_t>& idx = pred_idx_;
  std::vector<char>& mark = pred_mark_;
  p.assign(E_, 0.0f), idx.assign(E_, 0), mark.assign(E_, 0);
  guess_.clear();
  for (int64_t t = std::max<int64_t>(0, T - 8); t < T; ++t) {  // a long batch uses nearly every expert anyway
    const void* xt = quantize_activation(R.type, x + t * H, H, pred_xq_);
    for (int32_t e = 0; e < E_; ++e) dot(H, &p[e], R.info->data + e * r_row, xt);
    if (hp.gating == Gating::Sigmoid)
      for (float& v : p) v = ops::sigmoid(v);
    else
      ops::softmax(p.data(), E_);
    for (int32_t e = 0; e < E_; ++e) p[e] += bias[e];
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    for (int64_t j = 0; j < k; ++j) mark[idx[j]] = 1;
  }
  for (int32_t e = 0; e < E_; ++e)
    if (mark[e]) guess_.push_back(e);
}

void ExpertStore::request(uint32_t il, std::vector<int32_t>& experts, const float* x, int64_t T) {
  std::vector<ReadJob> jobs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    K3_ASSERT(cur_pins_.empty() && pending_.empty());
    if (trace_.is_open()) {
      trace_ << il;
      for (int32_t e : experts) trace_ << ' ' << e;
      trace_ << '\n';
    }
    auto& pred = predicted_[il];
    if (!pred.empty()) {
      st_.predicted += experts.size();
      for (int32_t e : experts) st_.predicted_right += std::binary_search(pred.begin(), pred.end(), e);
      pred.clear();
    }
    policy_->tick(il);
    // pin the resident experts first, so that reading a missing one cannot evict another of this request
    for (int32_t e : experts) {
      const int32_t key = static_cast<int32_t>(il) * E_ + e;
      policy_->access(key);
      const int32_t s = where_[key];
      if (s < 0) continue;
      ++st_.hits;
      if (slots_[s].prefetched) ++st_.prefetch_used, slots_[s].prefetched = false;
      ++slots_[s].pins;
      cur_pins_.push_back(s);
    }
    for (int32_t e : experts) {
      const int32_t key = static_cast<int32_t>(il) * E_ + e;
      if (where_[key] >= 0) continue;
      ++st_.misses;
      const int32_t s = alloc_locked();
      if (s < 0) {
        pending_.push_back(e);
        continue;
      }
      load_locked(s, key, jobs);
      ++slots_[s].pins;
      cur_pins_.push_back(s);
    }
    if (!jobs.empty()) reader_->submit(jobs);
    std::stable_partition(experts.begin(), experts.end(), [&](int32_t e) {
      const int32_t s = where_[static_cast<int32_t>(il) * E_ + e];
      return s >= 0 && slots_[s].st == Slot::St::Ready;
    });
  }
  // next layer's experts from its router applied to this input
  const uint32_t next = il + 1;
  if (!o_.prefetch || next >= seg_.size() || !seg_[next][0].info) return;
  predict(next, x, T);
  std::lock_guard<std::mutex> lk(mu_);
  predicted_[next] = guess_;
  if (!pending_.empty()) return;  // the cache is full of this layer's experts
  const auto now = Clock::now();
  const double wall = std::chrono::duration<double>(now - util_t0_).count();
  if (wall >= kUtilWindowS) {
    const double busy = reader_->busy_seconds();
    util_ = (busy - util_busy0_) / wall;
    util_t0_ = now, util_busy0_ = busy;
  }
  if (util_ > kMaxUtil) {
    ++st_.prefetch_skipped;
    return;
  }
  jobs.clear();
  for (int32_t e : guess_) {
    const int32_t key = static_cast<int32_t>(next) * E_ + e;
    if (where_[key] >= 0) continue;
    const int32_t s = alloc_locked();
    if (s < 0) break;
    load_locked(s, key, jobs);
    slots_[s].prefetched = true;
    ++st_.prefetched;
  }
  if (!jobs.empty()) reader_->submit(jobs);
}

ExpertMats ExpertStore::acquire(uint32_t il, int32_t e) {
  const int32_t key = static_cast<int32_t>(il) * E_ + e;
  std::unique_lock<std::mutex> lk(mu_);
  int32_t s = where_[key];
  if (s < 0) {
    auto it = std::find(pending_.begin(), pending_.end(), e);
    if (it == pending_.end()) fail("expert store: expert %d of layer %u acquired without a request", e, il);
    pending_.erase(it);
    // a slot frees up when a mispredicted prefetch lands, or when one kept for an expert of this
    // request that is not in use yet gives it up; if every slot is in use, the caller broke the
    // protocol (done() per expert, a group of at most the capacity)
    while ((s = alloc_locked()) < 0) {
      if (unpin_unused_locked()) continue;
      const bool landing = std::any_of(slots_.begin(), slots_.end(), [](const Slot& x) {
        return x.st == Slot::St::Loading && (x.pins == 0 || (!x.held && !x.permanent));
      });
      if (!landing)
        fail("expert store: no evictable slot for expert %d of layer %u (capacity %zu, all in use)", e, il,
             slots_.size());
      cv_.wait(lk);
    }
    std::vector<ReadJob> jobs;
    load_locked(s, key, jobs);
    reader_->submit(jobs);
    ++slots_[s].pins;
    cur_pins_.push_back(s);
  }
  Slot& sl = slots_[s];
  if (sl.st == Slot::St::Loading) {
    const auto t0 = Clock::now();
    cv_.wait(lk, [&] { return sl.st != Slot::St::Loading; });
    st_.stall_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (sl.st == Slot::St::Failed) throw Error(sl.error);
  sl.held = true;
  ExpertMats m;
  WeightView* v[3] = {&m.gate, &m.up, &m.down};
  for (int p = 0; p < 3; ++p) {
    const Segment& g = seg_[il][p];
    *v[p] = WeightView{g.type, sl.buf + sl.seg_at[p] + sl.pad[p], g.ne0, g.ne1, g.row_bytes};
  }
  return m;
}

void ExpertStore::done(uint32_t il, int32_t e) {
  std::lock_guard<std::mutex> lk(mu_);
  const int32_t s = where_[static_cast<int32_t>(il) * E_ + e];
  if (s < 0) return;
  auto it = std::find(cur_pins_.begin(), cur_pins_.end(), s);
  if (it == cur_pins_.end()) return;
  cur_pins_.erase(it);
  --slots_[s].pins;
  slots_[s].held = false;
  // a slot may have become evictable: start the next expert that was waiting for one
  std::vector<ReadJob> jobs;
  while (!pending_.empty()) {
    const int32_t n = alloc_locked();
    if (n < 0) break;
    load_locked(n, static_cast<int32_t>(il) * E_ + pending_.front(), jobs);
    ++slots_[n].pins;
    cur_pins_.push_back(n);
    pending_.erase(pending_.begin());
  }
  if (!jobs.empty()) reader_->submit(jobs);
}

void ExpertStore::release(uint32_t) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  for (int32_t s : cur_pins_) {
    slots_[s].held = false;
    if (--slots_[s].pins == 0 && slots_[s].st == Slot::St::Failed) free_locked(s);
  }
  cur_pins_.clear();
  pending_.clear();
}

std::vector<double> ExpertStore::trace_weights(const RoutingTrace& tr) const {
  if (tr.n_layer != seg_.size() || tr.n_expert != E_)
    fail("routing trace is for %u layers x %d experts, the model has %zu x %d", tr.n_layer, tr.n_expert, seg_.size(),
         E_);
  std::vector<double> w(where_.size(), 0.0);
  for (const auto& g : tr.groups)
    for (int32_t e : g.experts) w[static_cast<size_t>(g.il) * E_ + e] += 1.0;
  return w;
}

int64_t ExpertStore::warmup(const std::vector<double>& weight_in, double pin_fraction) {
  const HParams& hp = m_.hparams();
  std::vector<double> weight = weight_in;
  if (weight.empty()) {  // uniform over layers; within a layer by selection bias
    weight.assign(where_.size(), 0.0);
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      if (!seg_[il][0].info) continue;
      const float* b = m_.weights().layers[il].exp_probs_b.f32();
      std::vector<int32_t> idx(E_);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t c) { return b[a] > b[c]; });
      for (int32_t r = 0; r < E_; ++r) weight[static_cast<size_t>(il) * E_ + idx[r]] = E_ - r;
    }
  }
  if (weight.size() != where_.size()) fail("warmup: %zu weights for %zu experts", weight.size(), where_.size());
  std::vector<int32_t> keys;
  for (int32_t key = 0; key < static_cast<int32_t>(weight.size()); ++key)
    if (weight[key] > 0 && seg_[key / E_][0].info) keys.push_back(key);
  std::stable_sort(keys.begin(), keys.end(), [&](int32_t a, int32_t b) { return weight[a] > weight[b]; });
  if (keys.size() > slots_.size()) keys.resize(slots_.size());
  uint32_t max_k = 1;
  for (uint32_t il = 0; il < hp.n_layer; ++il) max_k = std::max(max_k, hp.n_expert_used[il]);
  const int64_t n_pin = std::min<int64_t>(static_cast<int64_t>(pin_fraction * slots_.size()),
                                          static_cast<int64_t>(slots_.size()) - max_k);
  const double wmax = keys.empty() ? 1.0 : weight[keys.front()];
  const auto t0 = Clock::now();
  // everything is queued at once (the reader keeps its queue depth full); then wait in order
  std::vector<int32_t> mine;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<ReadJob> jobs;
    for (size_t j = 0; j < keys.size(); ++j) {
      if (where_[keys[j]] >= 0) continue;
      const int32_t s = alloc_locked();
      if (s < 0) break;
      load_locked(s, keys[j], jobs);
      slots_[s].permanent = static_cast<int64_t>(j) < n_pin;
      policy_->seed(keys[j], 1.0 + 3.0 * weight[keys[j]] / wmax);
      mine.push_back(s);
    }
    if (!jobs.empty()) reader_->submit(jobs);
  }
  int64_t loaded = 0;
  std::unique_lock<std::mutex> lk(mu_);
  for (int32_t s : mine) {
    cv_.wait(lk, [&] { return slots_[s].st != Slot::St::Loading; });
    if (slots_[s].st == Slot::St::Failed) fail("warmup: %s", slots_[s].error.c_str());
    ++loaded;
    if (!o_.quiet && (loaded % 32 == 0 || loaded == static_cast<int64_t>(mine.size()))) {
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      const int bar = static_cast<int>(30.0 * loaded / mine.size());
      std::fprintf(stderr, "\rk3: warmup [%s%s] %lld/%zu experts, %.2f GB, %.2f GB/s", std::string(bar, '#').c_str(),
                   std::string(30 - bar, '.').c_str(), static_cast<long long>(loaded), mine.size(),
                   loaded * slot_bytes_ / 1e9, sec > 0 ? loaded * slot_bytes_ / 1e9 / sec : 0.0);
    }
  }
  if (!o_.quiet && !mine.empty()) std::fprintf(stderr, "\n");
  return loaded;
}

ExpertStats ExpertStore::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  ExpertStats s = st_;
  s.bytes_read = reader_->bytes_read();
  s.read_busy_s = reader_->busy_seconds();
  s.capacity = static_cast<int64_t>(slots_.size());
  for (const auto& sl : slots_) {
    s.resident += sl.st == Slot::St::Ready;
    s.pinned += sl.permanent;
  }
  s.slot_bytes = slot_bytes_;
  s.budget_bytes = budget_;
  s.direct_io = reader_->direct();
  s.io_engine = reader_->engine();
  return s;
}

}  // namespace k3::model
