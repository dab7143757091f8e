#include "cache/peers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cache/disk.h"
#include "cache/identity.h"

namespace k3::cache {

namespace {

// The operations, as words: the code, then its fields in the order below.
enum class Op : int64_t {
  Open = 1,  // cache, template hash, compute, dir
  Close,     // cache
  Rows,      // id, state, a, b
  Slice,     // id, source, off, n
  Snap,      // id, state
  Drop,      // id
  Restore,   // state, n_ctx, snapshot, row ids
  Write,     // cache, where, ids, content, row ids, snapshot ids
  Read,      // cache, where, state, n_ctx, tokens hash, snapshot positions, snapshot ids
  Remove,    // cache, where
};

class Words {
 public:
  explicit Words(Op op) { w_.push_back(static_cast<int64_t>(op)); }
  Words& put(int64_t v) {
    w_.push_back(v);
    return *this;
  }
  Words& put(uint64_t v) { return put(static_cast<int64_t>(v)); }
  Words& put(const std::string& s) {
    put(static_cast<int64_t>(s.size()));
    const size_t at = w_.size();
    w_.resize(at + (s.size() + 7) / 8, 0);
    std::memcpy(w_.data() + at, s.data(), s.size());
    return *this;
  }
  template <class T>
  Words& put(std::span<const T> v) {
    put(static_cast<int64_t>(v.size()));
    for (const T& x : v) put(static_cast<int64_t>(x));
    return *this;
  }
  Words& put(const FileRef& f) { return put(f.entry).put(f.path); }
  std::vector<int64_t> take() { return std::move(w_); }

 private:
  std::vector<int64_t> w_;
};

class Reader {
 public:
  explicit Reader(std::span<const int64_t> w) : w_(w) {}
  int64_t i64() {
    if (at_ >= w_.size()) fail("prompt cache: a truncated operation from the leader");
    return w_[at_++];
  }
  uint64_t u64() { return static_cast<uint64_t>(i64()); }
  std::string str() {
    const size_t n = count(8);
    std::string s(n, '\0');
    std::memcpy(s.data(), w_.data() + at_, n);
    at_ += (n + 7) / 8;
    return s;
  }
  template <class T>
  std::vector<T> list() {
    std::vector<T> v(count(1));
    for (T& x : v) x = static_cast<T>(i64());
    return v;
  }
  FileRef file() {
    FileRef f;
    f.entry = u64();
    f.path = str();
    return f;
  }

 private:
  size_t count(size_t per_word) {  // a length (of items, per_word to a word), checked against what is left
    const int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > (w_.size() - at_) * per_word) fail("prompt cache: a bad operation from the leader");
    return static_cast<size_t>(n);
  }
  std::span<const int64_t> w_;
  size_t at_ = 0;
};

template <class T>
std::span<const uint64_t> ids_of(const std::vector<std::shared_ptr<T>>& v, std::vector<uint64_t>& out) {
  out.clear();
  for (const auto& x : v) out.push_back(x->id.get());
  return out;
}

}  // namespace

// ---- PeerId ----

PeerId::PeerId(Peers* peers) : peers_(peers), id_(peers->new_id()) {}

PeerId& PeerId::operator=(PeerId&& o) noexcept {
  if (this != &o) {
    PeerId gone(std::move(*this));
    peers_ = std::exchange(o.peers_, nullptr);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

PeerId::~PeerId() {
  if (peers_) peers_->post(Words(Op::Drop).put(id_).take());
}

// ---- Shares: the leader ----

bool Shares::open(uint64_t template_hash, const std::string& compute, const std::string& dir) {
  if (!peers_) return true;
  cache_ = peers_->new_id();
  return peers_->ask(Words(Op::Open).put(cache_).put(template_hash).put(compute).put(dir).take());
}

void Shares::close() {
  if (peers_) peers_->post(Words(Op::Close).put(cache_).take());
}

std::shared_ptr<const Rows> Shares::rows(const model::State& st, int64_t a, int64_t b) const {
  std::shared_ptr<Rows> r = copy_rows(l_, st, a, b);
  if (peers_) {
    r->id = PeerId(peers_);
    peers_->post(Words(Op::Rows).put(r->id.get()).put(st.id()).put(a).put(b).take());
  }
  return r;
}

std::shared_ptr<const Rows> Shares::slice(const Rows& src, int64_t off, int64_t n) const {
  std::shared_ptr<Rows> r = slice_rows(l_, src, off, n);
  if (peers_) {
    r->id = PeerId(peers_);
    peers_->post(Words(Op::Slice).put(r->id.get()).put(src.id.get()).put(off).put(n).take());
  }
  return r;
}

std::shared_ptr<const Snapshot> Shares::snapshot(const model::State& st, std::span<const float> logits) const {
  std::shared_ptr<Snapshot> s = take_snapshot(l_, st, logits);
  if (peers_) {
    s->id = PeerId(peers_);
    peers_->post(Words(Op::Snap).put(s->id.get()).put(st.id()).take());
  }
  return s;
}

void Shares::restore(model::State& st, std::span<const Rows* const> pieces, const Snapshot& s,
                     std::vector<float>* logits) const {
  cache::restore(l_, st, pieces, s, logits);
  if (!peers_) return;
  std::vector<uint64_t> ids;
  for (const Rows* r : pieces) ids.push_back(r->id.get());
  peers_->post(Words(Op::Restore).put(st.id()).put(st.n_ctx()).put(s.id.get()).put(std::span<const uint64_t>(ids)).take());
}

uint64_t Shares::write(const std::string& path, const Identity& id, const PathData& p,
                       const nlohmann::ordered_json& extra, const FileRef& where, bool wait) const {
  const uint64_t bytes = write_file(path, temporary_for(path), l_, id, p, extra);
  if (!peers_) return bytes;
  std::vector<uint64_t> rows, snaps;
  for (const auto& r : p.rows) rows.push_back(r->id.get());
  for (const auto& s : p.snaps) snaps.push_back(s->id.get());
  std::vector<int64_t> op = Words(Op::Write)
                                .put(cache_)
                                .put(where)
                                .put(std::span<const int32_t>(p.ids))
                                .put(std::span<const uint64_t>(p.content))
                                .put(std::span<const uint64_t>(rows))
                                .put(std::span<const uint64_t>(snaps))
                                .take();
  if (!wait) {
    peers_->post(std::move(op));
  } else if (!peers_->ask(std::move(op))) {
    ::unlink(path.c_str());
    throw FileError(FileError::Partial, path + ": another process of the job could not write its share (see its message)");
  }
  return bytes;
}

std::vector<std::shared_ptr<Snapshot>> Shares::read(const FileInfo& f, const FileRef& where, model::State& st) const {
  std::vector<std::shared_ptr<Snapshot>> snaps = read_pieces(f, f.snaps.size() - 1, l_, st);
  if (!peers_) return snaps;
  for (auto& s : snaps) s->id = PeerId(peers_);
  std::vector<uint64_t> ids;
  const bool ok = peers_->ask(Words(Op::Read)
                                  .put(cache_)
                                  .put(where)
                                  .put(st.id())
                                  .put(st.n_ctx())
                                  .put(tokens_hash(f.ids, f.content))
                                  .put(std::span<const int64_t>(f.snaps))
                                  .put(ids_of(snaps, ids))
                                  .take());
  if (!ok) {
    st.reset();
    throw FileError(FileError::Partial,
                    f.path + ": another process of the job could not read its share of this entry (see its message)");
  }
  return snaps;
}

void Shares::remove(const FileRef& where) const {
  if (peers_) peers_->post(Words(Op::Remove).put(cache_).put(where).take());
}

// ---- Replica: the others ----

Replica::Replica(const model::Model& m, int rank, StateOf state)
    : m_(m), rank_(rank), state_(std::move(state)), l_(Layout::of(m, false)) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      lk.unlock();
      job();
      job = nullptr;  // its data goes outside the lock
      lk.lock();
      busy_ = false;
      if (jobs_.empty()) idle_cv_.notify_all();
    }
  });
}

Replica::~Replica() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Replica::queue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void Replica::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return jobs_.empty() && !busy_; });
}

void Replica::warn(const std::string& what) const {
  std::fprintf(stderr, "k3: warning: prompt cache (rank %d): %s\n", rank_, what.c_str());
}

std::string Replica::path_of(const Instance& c, const FileRef& f) const {
  if (!f.entry) return f.path + ".rank-" + std::to_string(rank_);
  return c.dir + "/" + entry_name(c.id.hash, f.entry);
}

bool Replica::apply(std::span<const int64_t> words, bool asked) {
  Reader in(words);
  const Op op = static_cast<Op>(in.i64());
  auto rows_of = [&](const std::vector<uint64_t>& ids) {
    std::vector<std::shared_ptr<const Rows>> v;
    for (uint64_t id : ids) v.push_back(rows_.at(id));
    return v;
  };
  switch (op) {
    case Op::Open: {
      const uint64_t cache = in.u64(), th = in.u64();
      const std::string compute = in.str(), dir = in.str();
      Instance c{identity_of(m_, th, compute), dir.empty() ? "" : dir + "/rank-" + std::to_string(rank_)};
      if (!c.dir.empty()) {
        for (const std::string& d : {dir, c.dir})
          if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
            warn(strprintf("%s: cannot create the directory: %s", d.c_str(), std::strerror(errno)));
            return false;
          }
        if (::access(c.dir.c_str(), R_OK | W_OK | X_OK) != 0) {
          warn(strprintf("%s: not readable and writable: %s", c.dir.c_str(), std::strerror(errno)));
          return false;
        }
        remove_stale_temporaries(c.dir);
      }
      caches_[cache] = std::move(c);
      return true;
    }
    case Op::Close:
      flush();
      caches_.erase(in.u64());
      return true;
    case Op::Rows: {
      const uint64_t id = in.u64(), st = in.u64();
      const int64_t a = in.i64(), b = in.i64();
      rows_[id] = copy_rows(l_, state_(st, 0), a, b);
      return true;
    }
    case Op::Slice: {
      const uint64_t id = in.u64(), src = in.u64();
      const int64_t off = in.i64(), n = in.i64();
      rows_[id] = slice_rows(l_, *rows_.at(src), off, n);
      return true;
    }
    case Op::Snap: {
      const uint64_t id = in.u64(), st = in.u64();
      snaps_[id] = take_snapshot(l_, state_(st, 0), {});
      return true;
    }
    case Op::Drop: {
      const uint64_t id = in.u64();
      rows_.erase(id), snaps_.erase(id);
      return true;
    }
    case Op::Restore: {
      const uint64_t st = in.u64();
      const int64_t n_ctx = in.i64();
      const uint64_t snap = in.u64();
      const auto rows = rows_of(in.list<uint64_t>());
      std::vector<const Rows*> pieces;
      for (const auto& r : rows) pieces.push_back(r.get());
      restore(l_, state_(st, n_ctx), pieces, *snaps_.at(snap), nullptr);
      return true;
    }
    case Op::Write: {
      const Instance& c = caches_.at(in.u64());
      const FileRef where = in.file();
      PathData p;
      p.ids = in.list<int32_t>();
      p.content = in.list<uint64_t>();
      p.rows = rows_of(in.list<uint64_t>());
      for (uint64_t id : in.list<uint64_t>()) p.snaps.push_back(snaps_.at(id));
      const std::string path = path_of(c, where);
      auto write = [this, path, id = c.id, p = std::move(p)]() {
        try {
          write_file(path, temporary_for(path), l_, id, p);
          return true;
        } catch (const FileError& e) {
          warn(e.what());
          return false;
        }
      };
      if (!asked) {
        queue([write = std::move(write)] { write(); });
        return true;
      }
      flush();
      return write();
    }
    case Op::Read: {
      const Instance& c = caches_.at(in.u64());
      const FileRef where = in.file();
      const uint64_t st_id = in.u64();
      const int64_t n_ctx = in.i64();
      const uint64_t tokens = in.u64();
      const std::vector<int64_t> positions = in.list<int64_t>();
      const std::vector<uint64_t> ids = in.list<uint64_t>();
      model::State& st = state_(st_id, n_ctx);
      flush();
      try {
        const FileInfo f = read_info(path_of(c, where), l_, c.id);
        if (f.snaps != positions || tokens_hash(f.ids, f.content) != tokens)
          throw FileError(FileError::Corrupt, f.path + ": holds another sequence than the leader's file");
        std::vector<std::shared_ptr<Snapshot>> snaps = read_pieces(f, f.snaps.size() - 1, l_, st);
        apply_snapshot(l_, st, *snaps.back(), nullptr);
        for (size_t i = 0; i < snaps.size(); ++i) snaps_[ids[i]] = std::move(snaps[i]);
        return true;
      } catch (const FileError& e) {
        st.reset();
        warn(std::string("not using ") + e.what());
        return false;
      }
    }
    case Op::Remove: {
      const Instance& c = caches_.at(in.u64());
      const std::string path = path_of(c, in.file());
      queue([path] { ::unlink(path.c_str()); });
      return true;
    }
  }
  fail("prompt cache: unknown operation %lld from the leader", static_cast<long long>(op));
}

}  // namespace k3::cache
