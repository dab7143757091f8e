#include "cache/disk.h"

#include "cache/identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace k3::cache {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kExt = ".k3pc";
constexpr const char* kTmp = ".k3pc-tmp-";
constexpr auto kPause = std::chrono::seconds(60);

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

int64_t mtime_ns(const struct stat& sb) {
  return static_cast<int64_t>(sb.st_mtim.tv_sec) * 1000000000 + sb.st_mtim.tv_nsec;
}

uint64_t path_bytes(const Layout& l, const PathData& p) {
  const uint64_t n = p.ids.size();
  return 4096 + n * 4 + p.content.size() * 8 + (n * l.row_floats() + p.snaps.size() * l.snapshot_floats()) * 4;
}

// Free bytes of dir. Test hook: K3_CACHE_FREE_BYTES=N stands in for the file system's answer.
uint64_t free_bytes(const std::string& dir) {
  if (const char* e = std::getenv("K3_CACHE_FREE_BYTES")) return std::strtoull(e, nullptr, 10);
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return UINT64_MAX;  // the write itself will tell
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

// Marks a file used now (the LRU order of the budget, shared with other servers); returns its time.
int64_t touch(const std::string& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0 ? mtime_ns(sb) : 0;
}

// Whether f's tokens (and content hashes) begin k.
bool begins(const FileInfo& f, Key k) {
  const int64_t n = static_cast<int64_t>(f.ids.size());
  if (n > k.size() || !std::equal(f.ids.begin(), f.ids.end(), k.ids.begin())) return false;
  for (int64_t i = 0; i < n; ++i)
    if ((f.content.empty() ? 0 : f.content[i]) != k.hash_at(i)) return false;
  return true;
}

}  // namespace

uint64_t tokens_hash(std::span<const int32_t> ids, std::span<const uint64_t> content) {
  XXH3_state_t* hs = XXH3_createState();
  XXH3_64bits_reset(hs);
  XXH3_64bits_update(hs, ids.data(), ids.size() * sizeof(int32_t));
  XXH3_64bits_update(hs, content.data(), content.size() * sizeof(uint64_t));
  const uint64_t h = XXH3_64bits_digest(hs);
  XXH3_freeState(hs);
  return h;
}

std::string entry_name(uint64_t identity, uint64_t tokens) {
  return strprintf("%016llx-%016llx", static_cast<unsigned long long>(identity), static_cast<unsigned long long>(tokens)) +
         kExt;
}

void remove_stale_temporaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kTmp, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kTmp), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

std::string temporary_for(const std::string& path) {
  static std::atomic<unsigned long long> counter{0};
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return dir + "/" + kTmp + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

DiskTier::DiskTier(const Shares& s, const Identity& id, const std::string& dir, int64_t budget, size_t max_queued,
                   Log log)
    : s_(s), l_(s.layout()), id_(id), dir_(dir), budget_(budget), max_queued_(max_queued), log_(std::move(log)) {
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
    fail("--cache-dir %s: cannot create the directory: %s", dir_.c_str(), std::strerror(errno));
  struct stat sb {};
  if (::stat(dir_.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) fail("--cache-dir %s: not a directory", dir_.c_str());
  if (::access(dir_.c_str(), R_OK | W_OK | X_OK) != 0)
    fail("--cache-dir %s: not readable and writable: %s", dir_.c_str(), std::strerror(errno));
  st_.budget = budget_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    scan();
  }
  thread_ = std::thread([this] { run(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DiskTier::scan() {
  struct stat ds {};
  if (::stat(dir_.c_str(), &ds) != 0) return;
  if (mtime_ns(ds) == dir_mtime_ns_) return;
  dir_mtime_ns_ = mtime_ns(ds);
  remove_stale_temporaries(dir_);  // writes that a killed process left behind: never usable files
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  std::set<std::string> seen;
  size_t new_foreign = 0;
  const std::string prefix = entry_name(id_.hash, 0).substr(0, 17);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name, path = dir_ + "/" + name;
    if (!ends_with(name, kExt)) continue;
    if (name.rfind(prefix, 0) != 0) {
      new_foreign += foreign_seen_.insert(name).second;
      continue;
    }
    struct stat sb {};
    if (::stat(path.c_str(), &sb) != 0) continue;
    seen.insert(name);
    auto it = index_.find(name);
    if (it != index_.end() && it->second.info->bytes == static_cast<uint64_t>(sb.st_size)) continue;
    const std::pair<int64_t, int64_t> sig{sb.st_size, mtime_ns(sb)};
    if (auto b = bad_.find(name); b != bad_.end() && b->second == sig) continue;
    try {
      index_[name] = Entry{std::make_shared<const FileInfo>(read_info(path, l_, id_)), mtime_ns(sb)};
    } catch (const FileError& err) {
      index_.erase(name);
      bad_[name] = sig;
      ++st_.skipped;
      log_(Level::Warn, std::string("prompt cache: skipping ") + err.what());
    }
  }
  ::closedir(d);
  for (auto it = index_.begin(); it != index_.end();) it = seen.count(it->first) ? std::next(it) : index_.erase(it);
  if (new_foreign)
    log_(Level::Warn, strprintf("prompt cache: %s: skipping %zu file(s) of other models or setups", dir_.c_str(),
                                new_foreign));
}

std::shared_ptr<const FileInfo> DiskTier::find(Key k, int64_t than) {
  std::lock_guard<std::mutex> lk(mu_);
  scan();
  std::shared_ptr<const FileInfo> best;
  for (const auto& [name, e] : index_) {
    const FileInfo& f = *e.info;
    const int64_t n = static_cast<int64_t>(f.ids.size());
    if (n <= than || (best && n <= static_cast<int64_t>(best->ids.size())) || !begins(f, k)) continue;
    best = e.info;
  }
  return best;
}

std::shared_ptr<Snapshot> DiskTier::load(const FileInfo& f, model::State& st, std::vector<float>* logits) {
  const auto t0 = Clock::now();
  const FileRef where{tokens_hash(f.ids, f.content), {}};
  try {
    auto snaps = s_.read(f, where, st);
    apply_snapshot(l_, st, *snaps.back(), logits);
    const int64_t now = touch(f.path);
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(f.path.substr(f.path.find_last_of('/') + 1)); it != index_.end()) it->second.mtime_ns = now;
    ++st_.loads;
    st_.load_bytes += static_cast<long long>(f.bytes);
    st_.load_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return snaps.back();
  } catch (const FileError& err) {
    // A file another server removed is a plain miss; anything else is a bad file. An entry that
    // another process of the job lacks is of no use here either: every process's file goes.
    const bool gone = err.kind == FileError::Missing;
    log_(gone ? Level::Debug : Level::Warn, std::string("prompt cache: not using ") + err.what());
    if (err.kind == FileError::Partial) ::unlink(f.path.c_str()), s_.remove(where);
    std::lock_guard<std::mutex> lk(mu_);
    const std::string name = f.path.substr(f.path.find_last_of('/') + 1);
    index_.erase(name);
    struct stat sb {};
    if (!gone && ::stat(f.path.c_str(), &sb) == 0) bad_[name] = {sb.st_size, mtime_ns(sb)};
    st_.skipped += !gone;
    return nullptr;
  }
}

void DiskTier::write(PathData p) {
  const size_t b = path_bytes(l_, p);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!queue_.empty() && queued_bytes_ + b > max_queued_) {
      ++st_.dropped;
      log_(Level::Debug, "prompt cache: disk write queue full, an entry stays in RAM only");
      return;
    }
    queued_bytes_ += b;
    queue_.push_back(std::move(p));
  }
  cv_.notify_all();
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

void DiskTier::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything written
    PathData p = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    write_one(p);
    const size_t b = path_bytes(l_, p);
    p = PathData{};  // the tree's data is released outside the lock
    lk.lock();
    queued_bytes_ -= b;
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void DiskTier::make_room(uint64_t need) {
  uint64_t total = 0;
  for (const auto& [name, e] : index_) total += e.info->bytes;
  while (total + need > static_cast<uint64_t>(budget_) && !index_.empty()) {
    auto oldest = index_.begin();
    for (auto it = index_.begin(); it != index_.end(); ++it)
      if (it->second.mtime_ns < oldest->second.mtime_ns) oldest = it;
    const FileInfo& f = *oldest->second.info;
    ::unlink(f.path.c_str());
    s_.remove(FileRef{tokens_hash(f.ids, f.content), {}});
    total -= f.bytes;
    index_.erase(oldest);
    ++st_.removed;
  }
}

void DiskTier::write_one(PathData& p) {
  const uint64_t hash = tokens_hash(p.ids, p.content);
  const std::string name = entry_name(id_.hash, hash), path = dir_ + "/" + name;
  const uint64_t need = path_bytes(l_, p);
  auto no_space = [&](const std::string& why) {
    std::lock_guard<std::mutex> lk(mu_);
    ++st_.no_space, ++st_.dropped;
    const bool first = Clock::now() >= paused_until_;
    paused_until_ = Clock::now() + kPause;
    if (first)
      log_(Level::Warn, strprintf("prompt cache: %s: %s; disk writes paused for %lld s, the cache goes on in RAM",
                                  dir_.c_str(), why.c_str(), static_cast<long long>(kPause.count())));
  };
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(name); it != index_.end()) {
      it->second.mtime_ns = touch(path);
      return;
    }
    if (Clock::now() < paused_until_) {
      ++st_.dropped;
      return;
    }
    if (need > static_cast<uint64_t>(budget_)) {
      ++st_.dropped;
      log_(Level::Debug, strprintf("prompt cache: a %s entry is larger than --cache-disk", format_size(need).c_str()));
      return;
    }
  }
  const uint64_t free = free_bytes(dir_);
  if (free < need + (16u << 20))
    return no_space(strprintf("the disk is full (%s free, %s needed)", format_size(free).c_str(),
                              format_size(need).c_str()));
  {
    std::lock_guard<std::mutex> lk(mu_);
    make_room(need);
  }
  const auto t0 = Clock::now();
  try {
    s_.write(path, id_, p, nullptr, FileRef{hash, {}}, false);
    auto info = std::make_shared<const FileInfo>(read_info(path, l_, id_));
    struct stat sb {};
    ::stat(path.c_str(), &sb);
    std::lock_guard<std::mutex> lk(mu_);
    ++st_.writes;
    st_.write_bytes += static_cast<long long>(info->bytes);
    st_.write_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    index_[name] = Entry{std::move(info), mtime_ns(sb)};
  } catch (const FileError& err) {
    if (err.kind == FileError::NoSpace) return no_space(err.what());
    std::lock_guard<std::mutex> lk(mu_);
    ++st_.dropped;
    log_(Level::Warn, std::string("prompt cache: ") + err.what());
  }
}

DiskStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  DiskStats s = st_;
  s.files = static_cast<long long>(index_.size());
  s.bytes = 0;
  for (const auto& [name, e] : index_) s.bytes += static_cast<long long>(e.info->bytes);
  return s;
}

}  // namespace k3::cache
