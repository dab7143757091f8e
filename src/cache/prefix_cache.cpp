#include "cache/prefix_cache.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <set>
#include <cstdio>

#include "cache/identity.h"

namespace k3::cache {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void stderr_log(Level lv, const std::string& msg) {
  if (lv == Level::Debug) return;
  std::fprintf(stderr, "k3: %s%s\n", lv == Level::Warn ? "warning: " : "", msg.c_str());
}

}  // namespace

// ---- Sequence ----

Sequence::Sequence(PrefixCache& c, Key prompt, std::vector<int64_t> boundaries)
    : c_(c), ids_(prompt.ids.begin(), prompt.ids.end()), boundaries_(std::move(boundaries)) {
  if (std::any_of(prompt.content.begin(), prompt.content.end(), [](uint64_t h) { return h != 0; }))
    content_.assign(prompt.content.begin(), prompt.content.end());
}

Sequence::~Sequence() {
  if (!pinned_) return;
  std::vector<PathData> writes;
  std::lock_guard<std::mutex> lk(c_.mu_);
  c_.tree_.unpin(pinned_);
  c_.evict(writes);  // what the pin kept beyond the budget
  c_.write_all(writes);
}

int64_t Sequence::restore(model::State& st, std::vector<float>& logits) {
  stops_.assign(1, static_cast<int64_t>(ids_.size()));
  restored_ = last_snap_ = 0;
  if (!c_.enabled()) {
    st.reset();
    return 0;
  }
  Tree::Match m;
  std::vector<std::shared_ptr<const Rows>> rows;
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard<std::mutex> lk(c_.mu_);
    m = c_.tree_.match(key(), ++c_.tick_);
    if (m.best != c_.tree_.root()) {
      c_.tree_.pin(pinned_ = m.best);
      rows = c_.tree_.path_rows(m.best);
      snap = m.best->snap;
    }
  }
  int64_t pos = snap ? snap->pos : 0;
  std::shared_ptr<const FileInfo> f = c_.disk_ ? c_.disk_->find(key(), pos) : nullptr;
  std::shared_ptr<Snapshot> from_disk = f ? c_.disk_->load(*f, st, &logits) : nullptr;
  if (from_disk) {
    pos = from_disk->pos;
    std::vector<PathData> writes;
    std::lock_guard<std::mutex> lk(c_.mu_);
    if (pinned_) c_.tree_.unpin(pinned_);
    Tree::Node* node = c_.tree_.insert(key(), pos, st, ++c_.tick_);
    c_.tree_.attach(node, from_disk);
    node->on_disk = true;
    c_.tree_.pin(pinned_ = node);
    c_.evict(writes);
    c_.write_all(writes);
  } else if (snap) {
    const auto t0 = Clock::now();
    std::vector<const Rows*> pieces;
    for (const auto& r : rows) pieces.push_back(r.get());
    c_.shares_.restore(st, pieces, *snap, &logits);
    std::lock_guard<std::mutex> lk(c_.mu_);
    c_.st_.restore_seconds += seconds_since(t0);
  } else {
    st.reset();
  }
  restored_ = last_snap_ = pos;
  plan_stops(m.lcp);
  {
    std::lock_guard<std::mutex> lk(c_.mu_);
    ++c_.st_.lookups;
    c_.st_.hits += pos > 0;
    c_.st_.cached_tokens += pos;
  }
  log_lookup(m, from_disk != nullptr);
  return pos;
}

// The end of the prompt; then message starts; then multiples of snapshot_every and where the prompt
// left the cache: each where it is at least snapshot_min_gap from the restored position and from
// every stop chosen before it.
void Sequence::plan_stops(int64_t lcp) {
  const int64_t n = static_cast<int64_t>(ids_.size()), gap = c_.o_.snapshot_min_gap;
  std::set<int64_t> keep = {n};
  auto offer = [&](int64_t p) {
    if (p - restored_ < gap || p >= n) return;
    auto next = keep.lower_bound(p);
    if (*next - p < gap || (next != keep.begin() && p - *std::prev(next) < gap)) return;
    keep.insert(p);
  };
  std::vector<int64_t> b = boundaries_;
  std::sort(b.begin(), b.end());
  for (int64_t p : b) offer(p);
  if (c_.o_.snapshot_every > 0)
    for (int64_t p = c_.o_.snapshot_every; p < n; p += c_.o_.snapshot_every) offer(p);
  offer(lcp);
  stops_.assign(keep.begin(), keep.end());
}

void Sequence::log_lookup(const Tree::Match& m, bool from_disk) const {
  const int64_t n = static_cast<int64_t>(ids_.size());
  if (m.other < 0 || m.lcp >= n) {
    c_.o_.log(Level::Debug, strprintf("prompt cache: %lld of %lld prompt tokens cached%s", static_cast<long long>(restored_),
                                      static_cast<long long>(n), from_disk ? " (from disk)" : ""));
    return;
  }
  auto text = [&](int32_t id) { return c_.o_.token_text ? " '" + c_.o_.token_text(id) + "'" : std::string(); };
  const int32_t other = static_cast<int32_t>(m.other);
  c_.o_.log(Level::Debug,
            strprintf("prompt cache: the prompt (%lld tokens) leaves the cache at position %lld: prompt token %d%s, "
                      "cached token %d%s; restored %lld%s, prefilling %lld",
                      static_cast<long long>(n), static_cast<long long>(m.lcp), ids_[m.lcp], text(ids_[m.lcp]).c_str(),
                      other, text(other).c_str(), static_cast<long long>(restored_), from_disk ? " (from disk)" : "",
                      static_cast<long long>(n - restored_)));
}

int64_t Sequence::next_stop(int64_t pos) const {
  auto it = std::upper_bound(stops_.begin(), stops_.end(), pos);
  return it == stops_.end() ? static_cast<int64_t>(ids_.size()) : *it;
}

void Sequence::reached(int64_t pos, const model::State& st, std::span<const float> logits) {
  if (!c_.enabled() || !std::binary_search(stops_.begin(), stops_.end(), pos)) return;
  snapshot_here(key().prefix(pos), st, logits);
}

void Sequence::finish(std::span<const int32_t> fed, const model::State& st, std::span<const float> logits) {
  const int64_t n = static_cast<int64_t>(fed.size());
  if (!c_.enabled() || n <= last_snap_ || n != st.n_past()) return;
  std::vector<uint64_t> content;
  if (!content_.empty()) {  // generated tokens carry no content hash
    content.assign(fed.size(), 0);
    std::copy_n(content_.begin(), std::min(content_.size(), content.size()), content.begin());
  }
  snapshot_here({fed, content}, st, logits);
}

void Sequence::snapshot_here(Key k, const model::State& st, std::span<const float> logits) {
  K3_ASSERT(st.n_past() == k.size());
  const auto t0 = Clock::now();
  std::shared_ptr<const Snapshot> snap = c_.shares_.snapshot(st, logits);
  const bool prompt_end = k.size() == static_cast<int64_t>(ids_.size());
  std::vector<PathData> writes;
  std::lock_guard<std::mutex> lk(c_.mu_);
  Tree::Node* node = c_.tree_.insert(k, k.size(), st, ++c_.tick_);
  c_.st_.snapshots_taken += c_.tree_.attach(node, std::move(snap));
  c_.st_.snapshot_seconds += seconds_since(t0);
  if (pinned_) c_.tree_.unpin(pinned_);
  c_.tree_.pin(pinned_ = node);
  last_snap_ = k.size();
  if (prompt_end && c_.disk_ && !node->on_disk) {
    writes.push_back(c_.path_of(node, 1));
    node->on_disk = true;
  }
  c_.evict(writes);
  c_.write_all(writes);
}

int64_t prefill(const model::Model& m, Sequence& seq, model::State& st, std::span<const int32_t> ids, int64_t n_batch,
                const model::RunOptions& opt, std::vector<float>& logits,
                const std::function<void(int64_t, int64_t)>& each_pass) {
  int64_t pos = seq.restore(st, logits);
  const int64_t cached = pos, n = static_cast<int64_t>(ids.size());
  while (pos < n) {
    const int64_t stop = seq.next_stop(pos);
    const int64_t T = std::min(n_batch > 0 ? n_batch : n, stop - pos);
    const bool at_stop = pos + T == stop;
    m.forward(st, ids.data() + pos, T, opt, at_stop ? model::Logits::Last : model::Logits::None, &logits);
    if (each_pass) each_pass(pos, T);
    pos += T;
    if (at_stop) seq.reached(pos, st, logits);
  }
  return cached;
}

// ---- PrefixCache ----

// This process's share of every state (the leader's, with the logits), copied on the others too.
PrefixCache::PrefixCache(const model::Model& m, const std::string& template_text, const std::string& compute,
                         Options o)
    : m_(m),
      o_(std::move(o)),
      shares_(Layout::of(m, true, o_.side_width), o_.peers),
      id_(identity_of(m, template_hash(template_text), compute)),
      tree_(shares_) {
  if (!o_.log) o_.log = stderr_log;
  if (o_.ram_bytes < 0) fail("prompt cache: negative RAM budget");
  st_.enabled = enabled();
  st_.ram_budget = o_.ram_bytes;
  const std::string dir = enabled() ? o_.dir : "";
  if (!shares_.open(template_hash(template_text), compute, dir))
    fail("prompt cache: another process of the job cannot use its part of %s (see its message)",
         dir.empty() ? "the cache" : dir.c_str());
  if (!dir.empty()) {
    // The writer may hold evicted entries a while: up to a quarter of the RAM budget (at least
    // two entries of 4096 tokens).
    const size_t entry = snapshot_bytes() + 4096 * token_bytes();
    disk_ = std::make_unique<DiskTier>(shares_, id_, dir, o_.disk_bytes,
                                       std::max<size_t>(static_cast<size_t>(o_.ram_bytes) / 4, 2 * entry), o_.log);
    st_.has_disk = true;
  }
}

PrefixCache::~PrefixCache() {
  disk_.reset();  // its queued writes first (the others' too)
  shares_.close();
}

std::unique_ptr<Sequence> PrefixCache::begin(Key prompt, std::vector<int64_t> boundaries) {
  return std::unique_ptr<Sequence>(new Sequence(*this, prompt, std::move(boundaries)));
}

PathData PrefixCache::path_of(const Tree::Node* n, size_t max_snaps) const {
  PathData p;
  tree_.path_key(n, p.ids, p.content);
  p.rows = tree_.path_rows(n);
  std::vector<const Tree::Node*> snaps = tree_.path_snapshots(n);
  if (snaps.size() > max_snaps) snaps.resize(max_snaps);
  for (auto it = snaps.rbegin(); it != snaps.rend(); ++it) p.snaps.push_back((*it)->snap);
  return p;
}

void PrefixCache::evict(std::vector<PathData>& writes) {
  tree_.evict_to(static_cast<size_t>(o_.ram_bytes), [&](Tree::Evicted&& e) {
    if (!disk_ || e.on_disk) return;
    PathData p;
    p.ids = std::move(e.ids);
    p.content = std::move(e.content);
    p.rows = std::move(e.rows);
    p.snaps = {std::move(e.snap)};
    writes.push_back(std::move(p));
  });
  st_.evictions = tree_.evictions();
}

void PrefixCache::write_all(std::vector<PathData>& writes) {
  for (PathData& p : writes) disk_->write(std::move(p));
  writes.clear();
}

PrefixCache::Saved PrefixCache::save(const std::string& path, Key k, const nlohmann::ordered_json& extra,
                                     size_t max_snaps) {
  PathData p;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const Tree::Match m = tree_.match(k, ++tick_);
    if (m.best == tree_.root())
      fail("%s: nothing of this sequence (%lld tokens) is in the prompt cache", path.c_str(),
           static_cast<long long>(k.size()));
    p = path_of(m.best, std::max<size_t>(1, max_snaps));
  }
  Saved s;
  s.bytes = shares_.write(path, id_, p, extra, FileRef{0, path}, true);
  s.n_tokens = static_cast<int64_t>(p.ids.size());
  s.snapshots = p.snaps.size();
  return s;
}

PrefixCache::Loaded PrefixCache::load(const std::string& path) {
  FileInfo f = read_info(path, l_, id_);
  model::State st = m_.new_state(std::max<int64_t>(1, f.snaps.back()));
  std::vector<std::shared_ptr<Snapshot>> snaps = shares_.read(f, FileRef{0, path}, st);
  apply_snapshot(l_, st, *snaps.back(), nullptr);
  std::vector<PathData> writes;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const Key k{f.ids, f.content};
    for (auto& s : snaps) {
      Tree::Node* n = tree_.insert(k, s->pos, st, ++tick_);
      tree_.attach(n, std::move(s));
    }
    evict(writes);
    write_all(writes);
  }
  Loaded r;
  r.ids = std::move(f.ids);
  r.bytes = f.bytes;
  r.snapshots = f.snaps.size();
  r.extra = std::move(f.extra);
  return r;
}

void PrefixCache::erase(Key k) {
  std::lock_guard<std::mutex> lk(mu_);
  const Tree::Match m = tree_.match(k, ++tick_);
  if (m.best != tree_.root()) tree_.erase_branch(m.best);
}

CacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  CacheStats s = st_;
  s.ram_bytes = static_cast<long long>(tree_.bytes());
  s.snapshots = static_cast<long long>(tree_.snapshots());
  s.nodes = static_cast<long long>(tree_.nodes());
  if (disk_) s.disk = disk_->stats();
  return s;
}

void PrefixCache::flush() {
  if (disk_) disk_->flush();
}

}  // namespace k3::cache
