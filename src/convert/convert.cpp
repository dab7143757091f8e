#include "convert/convert.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "convert/emit.h"
#include "convert/manifest.h"
#include "convert/progress.h"
#include "convert/digest.h"
#include "gguf/writer.h"

namespace k3::convert {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_signal(int) { g_interrupted = 1; }

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

// Test hook: K3_CONVERT_CRASH="tensor:N" | "written:N" | "renamed:N" kills the process (SIGKILL)
// at the N-th such event, to exercise recovery at exact points.
class CrashPoints {
 public:
  CrashPoints() {
    const char* e = std::getenv("K3_CONVERT_CRASH");
    if (!e) return;
    std::string s(e);
    size_t c = s.find(':');
    if (c == std::string::npos) return;
    point_ = s.substr(0, c);
    at_ = std::atol(s.c_str() + c + 1);
  }
  void hit(const char* point) {
    if (point_ == point && ++count_ == at_) std::raise(SIGKILL);
  }

 private:
  std::string point_;
  long at_ = 0;
  std::atomic<long> count_{0};
};

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool same_value(const gguf::Value& a, const gguf::Value& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.v);
        if constexpr (std::is_same_v<T, gguf::Array>) {
          return x.elem == y.elem && x.data == y.data;
        } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          return std::memcmp(&x, &y, sizeof(T)) == 0;
        } else {
          return x == y;
        }
      },
      a.v);
}

void copy_file_synced(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) fail("%s: cannot copy to %s: %s", from.c_str(), to.c_str(), ec.message().c_str());
  int fd = ::open(to.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) fail("%s: cannot sync: %s", to.c_str(), std::strerror(errno));
  ::close(fd);
}

class Converter {
 public:
  explicit Converter(const ConvertOptions& o) : opt_(o), progress_(!o.quiet) {}
  ~Converter() { unlock_dir(); }  // also when a check before the work fails
  Converter(const Converter&) = delete;
  Converter& operator=(const Converter&) = delete;

  ConvertResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    out_dir_ = opt_.out_dir;
    scratch_ = opt_.scratch.empty() ? out_dir_ : opt_.scratch;
    plan_ = make_plan(opt_.plan);
    for (const auto& n : plan_.notes) {
      if (opt_.quiet && n.starts_with("warning:")) std::fprintf(stderr, "%s\n", n.c_str());  // even when quiet
      progress_.message(n);
    }

    const int n = static_cast<int>(plan_.parts.size()), n_text = plan_.n_text_parts;
    if (opt_.vocab_only) {
      write_vocab_only();
      return result_;
    }
    select_parts();
    const bool has_mmproj = n > n_text;
    progress_.message(strprintf("%s: %zu source tensors in %zu shards -> %zu GGUF tensors in %d parts%s (%zu selected)",
                                opt_.plan.src.c_str(), count_sources(), plan_.shards.size(), plan_.tensors.size(), n_text,
                                has_mmproj ? " + mmproj" : "", todo_.size()));
    if (opt_.dry_run) {
      for (const auto& p : plan_.parts)
        progress_.message(strprintf("  %s: %zu tensors, %s", p.file.c_str(), p.tensors.size(),
                                    Progress::human_bytes(static_cast<double>(p.file_bytes)).c_str()));
      progress_.stop();
      ConvertResult r;
      r.parts_total = n;
      return r;
    }

    std::error_code ec;
    fs::create_directories(out_dir_, ec);
    if (ec) fail("%s: cannot create: %s", out_dir_.c_str(), ec.message().c_str());
    fs::create_directories(scratch_, ec);
    if (ec) fail("%s: cannot create: %s", scratch_.c_str(), ec.message().c_str());
    lock_dir();
    load_manifest();
    check_space();

    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    uint64_t total = 0;
    for (int pi : todo_) total += plan_.parts[pi].data_bytes;
    progress_.set_total(total, static_cast<int>(todo_.size()));

    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; !cancel_ && !g_interrupted && (i = next++) < todo_.size();) {
        try {
          do_part(plan_.parts[todo_[i]]);
        } catch (const Cancelled&) {
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu_);
          if (!error_) error_ = std::current_exception();
          cancel_ = true;
        }
      }
    };
    const int jobs = std::max(1, std::min<int>(opt_.jobs, static_cast<int>(todo_.size())));
    std::vector<std::thread> pool;
    for (int i = 1; i < jobs; ++i) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    progress_.stop();
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    if (manifest_dirty_ && !error_) save_manifest();
    if (!error_ && !g_interrupted) remove_stale_temporaries();
    unlock_dir();
    if (error_) std::rethrow_exception(error_);
    if (g_interrupted) fail("interrupted; finished parts are kept, rerun to continue");

    result_.parts_total = n;
    result_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary();
    return result_;
  }

 private:
  // --shards: text part numbers (1-based) and/or "mmproj"; all parts without it.
  void select_parts() {
    const int n = static_cast<int>(plan_.parts.size()), n_text = plan_.n_text_parts;
    if (opt_.shards.empty()) {
      for (int i = 0; i < n; ++i) todo_.push_back(i);
      return;
    }
    std::string spec, item;
    bool mmproj = false;
    std::stringstream ss(opt_.shards);
    while (std::getline(ss, item, ','))
      if (item == "mmproj") mmproj = true;
      else spec += (spec.empty() ? "" : ",") + item;
    if (mmproj && n == n_text) fail("--shards '%s': this checkpoint has no vision tensors, so there is no mmproj", opt_.shards.c_str());
    if (!spec.empty())
      for (int no : parse_shard_spec(spec, n_text)) todo_.push_back(no - 1);
    if (mmproj) todo_.push_back(n - 1);
  }

  // --vocab-only: every kimi-k3.* key and the tokenizer, no tensors.
  void write_vocab_only() {
    std::error_code ec;
    fs::create_directories(out_dir_, ec);
    if (ec) fail("%s: cannot create: %s", out_dir_.c_str(), ec.message().c_str());
    const std::string path = (fs::path(out_dir_) / (plan_.meta.get_str("general.name") + "-vocab.gguf")).string();
    gguf::Metadata meta = plan_.meta;
    meta.erase("general.file_type");
    gguf::Writer w(path, meta, {});
    w.finish();
    progress_.stop();
    if (!opt_.quiet) std::fprintf(stderr, "k3 convert: wrote %s (vocabulary and hyperparameters, no tensors)\n", path.c_str());
    result_.parts_written = 1;
  }

  size_t count_sources() const {
    size_t c = 0;
    for (const auto& t : plan_.tensors) c += t.src.size();
    return c;
  }

  void lock_dir() {
    lock_path_ = (fs::path(out_dir_) / ".k3-convert.lock").string();
    lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) fail("%s: cannot create: %s", lock_path_.c_str(), std::strerror(errno));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
      fail("%s: another k3 convert is writing to this directory", out_dir_.c_str());
  }
  void unlock_dir() {
    if (lock_fd_ < 0) return;
    ::unlink(lock_path_.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
  }

  // Temporary files a killed run left behind (no worker is running now).
  void remove_stale_temporaries() {
    for (const Part& p : plan_.parts)
      for (const std::string& dir : {out_dir_, scratch_})
        for (const char* suffix : {".incomplete", ".incomplete.tmp"}) {
          std::error_code ec;
          fs::remove(fs::path(dir) / (p.file + suffix), ec);
        }
  }

  void load_manifest() {
    manifest_path_ = (fs::path(out_dir_) / kManifestName).string();
    if (!fs::exists(manifest_path_)) return;
    try {
      manifest_ = Manifest::load(manifest_path_);
    } catch (const Error& e) {
      progress_.message(strprintf("warning: %s; starting a new manifest (existing parts will be checked and redone)", e.what()));
      manifest_ = Manifest{};
      manifest_dirty_ = true;
      return;
    }
    // Entries that this plan would never produce cannot vouch for anything: drop them.
    std::map<std::string, const OutTensor*> by_name;
    for (const auto& t : plan_.tensors) by_name[t.name] = &t;
    for (auto it = manifest_.tensors.begin(); it != manifest_.tensors.end();) {
      auto p = by_name.find(it->first);
      if (p == by_name.end() || it->second.type != type_name(p->second->type) || it->second.ne != p->second->ne) {
        it = manifest_.tensors.erase(it);
        manifest_dirty_ = true;
      } else {
        ++it;
      }
    }
  }

  void save_manifest() {
    manifest_.save(manifest_path_);
    fsync_dir(out_dir_);
    manifest_dirty_ = false;
  }

  // Test hook: K3_CONVERT_FREE_BYTES=N stands in for the free space of every directory.
  static uint64_t free_bytes(const std::string& dir) {
    if (const char* e = std::getenv("K3_CONVERT_FREE_BYTES")) return std::strtoull(e, nullptr, 10);
    struct statvfs s;
    if (::statvfs(dir.c_str(), &s) != 0) return UINT64_MAX;
    return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
  }
  static dev_t device_of(const std::string& dir) {
    struct stat st;
    return ::stat(dir.c_str(), &st) == 0 ? st.st_dev : 0;
  }

  void check_space() {
    uint64_t need = 0, biggest = 0;
    for (int pi : todo_) {
      const Part& p = plan_.parts[pi];
      std::error_code ec;
      const fs::path final = fs::path(out_dir_) / p.file;
      // A finished part of the right size is probably kept; anything else will be written.
      if (fs::exists(final, ec) && fs::file_size(final, ec) == p.file_bytes) continue;
      need += p.file_bytes;
      biggest = std::max(biggest, p.file_bytes);
    }
    const uint64_t margin = 64ull << 20;
    const bool split_fs = device_of(scratch_) != device_of(out_dir_);
    const uint64_t free_out = free_bytes(out_dir_);
    if (need > 0 && need + margin > free_out)
      fail("not enough disk space in %s: the parts to write need %s, %s is free", out_dir_.c_str(),
           Progress::human_bytes(static_cast<double>(need + margin)).c_str(),
           Progress::human_bytes(static_cast<double>(free_out)).c_str());
    if (split_fs && need > 0) {
      const uint64_t scratch_need = biggest * static_cast<uint64_t>(std::max(1, opt_.jobs)) + margin;
      const uint64_t free_s = free_bytes(scratch_);
      if (scratch_need > free_s)
        fail("not enough disk space in %s (--scratch): %d parts in flight need up to %s, %s is free",
             scratch_.c_str(), opt_.jobs, Progress::human_bytes(static_cast<double>(scratch_need)).c_str(),
             Progress::human_bytes(static_cast<double>(free_s)).c_str());
    }
  }

  std::vector<const OutTensor*> tensors_of(const Part& p) const {
    std::vector<const OutTensor*> v;
    for (int i : p.tensors) v.push_back(&plan_.tensors[i]);
    return v;
  }

  // Checks a finished file: size, structure (the GGUF reader validates everything), metadata and
  // tensor table equal to the plan, and (unless `kind` is empty) every tensor's bytes having the
  // digest in `expected`. Returns the first problem found, or "" if the file is exactly right.
  std::string check_file(const std::string& path, const Part& p, std::optional<Digest> kind,
                         const std::map<std::string, std::string>& expected, int slot) {
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) return "cannot stat: " + ec.message();
    if (size != p.file_bytes) return strprintf("size %llu, expected %llu", (unsigned long long)size, (unsigned long long)p.file_bytes);
    std::unique_ptr<gguf::File> f;
    std::unique_ptr<SeqReader> in;
    try {
      f = gguf::File::open(path);
      in = std::make_unique<SeqReader>(path);
    } catch (const Error& e) {
      return std::string("not a valid GGUF: ") + e.what();
    }
    const auto& kv = f->meta().kvs();
    const auto& want = p.meta.kvs();
    if (kv.size() != want.size()) return "metadata differs from this conversion's";
    for (size_t i = 0; i < kv.size(); ++i)
      if (kv[i].key != want[i].key || !same_value(kv[i].value, want[i].value))
        return "metadata key '" + want[i].key + "' differs from this conversion's";
    auto ts = tensors_of(p);
    if (f->tensors().size() != ts.size()) return "tensor table differs from this conversion's";
    for (size_t i = 0; i < ts.size(); ++i) {
      const gguf::TensorInfo& ti = f->tensors()[i];
      const OutTensor& t = *ts[i];
      if (ti.name != t.name || ti.type != t.type || std::vector<int64_t>(ti.ne, ti.ne + ti.n_dims) != t.ne)
        return "tensor table differs from this conversion's at '" + t.name + "'";
      if (!kind) continue;
      auto e = expected.find(t.name);
      if (e == expected.end()) return "tensor '" + t.name + "' has no hash in " + std::string(kManifestName);
      if (cancel_ || g_interrupted) throw Cancelled();
      const std::string h = digest_file_range(*kind, *in, f->data_offset() + ti.offset, ti.nbytes,
                                              [&](uint64_t n) { progress_.tick(slot, n); });
      if (h != e->second)
        return "tensor '" + t.name + "': " + (kind == Digest::Sha256 ? "SHA-256" : "XXH3") + " mismatch";
    }
    return {};
  }

  class PartSink : public Sink {
   public:
    PartSink(Converter& c, gguf::Writer& w, int slot) : c_(c), w_(w), slot_(slot) {}
    void put(const void* data, size_t n) override {
      if (c_.cancel_ || g_interrupted) throw Cancelled();
      sha.update(data, n);
      if (c_.opt_.verify_writes) xxh.update(data, n);
      w_.write(data, n);
      c_.progress_.add(slot_, n);
    }
    Sha256 sha;  // for the manifest
    Xxh3 xxh;    // for the read back

   private:
    Converter& c_;
    gguf::Writer& w_;
    int slot_;
  };

  std::string label(const Part& p) const {
    return p.mmproj ? std::string("mmproj") : strprintf("part %d/%d", p.no + 1, plan_.n_text_parts);
  }

  void do_part(const Part& p) {
    const std::string final = (fs::path(out_dir_) / p.file).string();
    std::error_code ec;
    if (fs::exists(final, ec)) {
      std::map<std::string, std::string> expected;
      {
        std::lock_guard<std::mutex> lk(manifest_mu_);
        for (int i : p.tensors) {
          auto it = manifest_.tensors.find(plan_.tensors[i].name);
          if (it != manifest_.tensors.end()) expected[it->first] = it->second.sha256;
        }
      }
      const int slot = progress_.begin(label(p) + " check", p.data_bytes);
      std::string why = check_file(final, p, Digest::Sha256, expected, slot);
      if (why.empty()) {
        progress_.add(slot, p.data_bytes);
        progress_.end(slot, strprintf("%s: %s complete, verified (%zu tensors); skipped", label(p).c_str(), p.file.c_str(),
                                      p.tensors.size()));
        std::lock_guard<std::mutex> lk(result_mu_);
        ++result_.parts_skipped;
        result_.tensors += p.tensors.size();
        return;
      }
      progress_.end(slot, strprintf("%s: %s is not a complete part (%s); converting it again", label(p).c_str(),
                                    p.file.c_str(), why.c_str()));
      if (::unlink(final.c_str()) != 0) fail("%s: cannot remove: %s", final.c_str(), std::strerror(errno));
    }

    const std::string staged = (fs::path(scratch_) / (p.file + ".incomplete")).string();
    const std::string in_out = (fs::path(out_dir_) / (p.file + ".incomplete")).string();
    const int slot = progress_.begin(label(p), p.data_bytes);
    std::map<std::string, std::string> hashes, quick;
    std::vector<gguf::TensorSpec> specs;
    for (const OutTensor* t : tensors_of(p)) specs.push_back({t->name, t->type, t->ne});
    try {
      {
        gguf::Writer w(staged, p.meta, specs);
        PartSink sink(*this, w, slot);
        for (const OutTensor* t : tensors_of(p)) {
          emit_tensor(plan_, *t, sink);
          hashes[t->name] = sink.sha.hex();
          if (opt_.verify_writes) quick[t->name] = sink.xxh.hex();
          crash_.hit("tensor");
        }
        w.finish();
      }
      crash_.hit("written");
      std::string check_path = staged;
      if (scratch_ != out_dir_) {
        if (::rename(staged.c_str(), in_out.c_str()) != 0) {
          if (errno != EXDEV) fail("%s: cannot move to %s: %s", staged.c_str(), in_out.c_str(), std::strerror(errno));
          copy_file_synced(staged, in_out);
          ::unlink(staged.c_str());
        }
        check_path = in_out;
      }
      if (opt_.verify_writes) progress_.relabel(slot, label(p) + " verify", p.data_bytes);
      const std::string why =
          check_file(check_path, p, opt_.verify_writes ? std::optional(Digest::Xxh3) : std::nullopt, quick, slot);
      if (!why.empty()) fail("%s: the written part failed verification: %s", check_path.c_str(), why.c_str());
      if (::rename(check_path.c_str(), final.c_str()) != 0)
        fail("%s: cannot rename to %s: %s", check_path.c_str(), final.c_str(), std::strerror(errno));
      fsync_dir(out_dir_);
    } catch (...) {
      ::unlink(staged.c_str());
      ::unlink(in_out.c_str());
      progress_.end(slot, strprintf("%s: %s not finished", label(p).c_str(), p.file.c_str()));
      throw;
    }
    crash_.hit("renamed");
    {
      std::lock_guard<std::mutex> lk(manifest_mu_);
      for (const OutTensor* t : tensors_of(p))
        manifest_.tensors[t->name] = ManifestEntry{hashes[t->name], type_name(t->type), t->ne};
      save_manifest();
    }
    progress_.end(slot, strprintf("%s: %s written and verified (%zu tensors, %s)", label(p).c_str(), p.file.c_str(),
                                  p.tensors.size(), Progress::human_bytes(static_cast<double>(p.file_bytes)).c_str()));
    std::lock_guard<std::mutex> lk(result_mu_);
    ++result_.parts_written;
    result_.tensors += p.tensors.size();
    result_.bytes_in += p.src_bytes;
    result_.bytes_out += p.file_bytes;
  }

  void summary() {
    if (opt_.quiet) return;
    std::map<std::string, std::pair<size_t, uint64_t>> by_type;
    for (int pi : todo_)
      for (const OutTensor* t : tensors_of(plan_.parts[pi])) {
        auto& e = by_type[type_name(t->type)];
        ++e.first;
        e.second += t->nbytes;
      }
    std::string types;
    for (const auto& [ty, e] : by_type)
      types += strprintf("%s%s %zu (%s)", types.empty() ? "" : ", ", ty.c_str(), e.first,
                         Progress::human_bytes(static_cast<double>(e.second)).c_str());
    const double s = std::max(result_.seconds, 1e-6);
    std::fprintf(stderr,
                 "k3 convert: %d parts written, %d already complete (of %d); %zu tensors: %s\n"
                 "k3 convert: %s read, %s written in %.1f s: %s/s in, %s/s out; manifest %s\n",
                 result_.parts_written, result_.parts_skipped, result_.parts_total, result_.tensors, types.c_str(),
                 Progress::human_bytes(static_cast<double>(result_.bytes_in)).c_str(),
                 Progress::human_bytes(static_cast<double>(result_.bytes_out)).c_str(), result_.seconds,
                 Progress::human_bytes(result_.bytes_in / s).c_str(), Progress::human_bytes(result_.bytes_out / s).c_str(),
                 manifest_path_.c_str());
  }

  const ConvertOptions& opt_;
  Progress progress_;
  Plan plan_;
  std::string out_dir_, scratch_, manifest_path_, lock_path_;
  int lock_fd_ = -1;
  std::vector<int> todo_;
  Manifest manifest_;
  bool manifest_dirty_ = false;
  std::mutex manifest_mu_, err_mu_, result_mu_;
  std::atomic<bool> cancel_{false};
  std::exception_ptr error_;
  ConvertResult result_;
  CrashPoints crash_;
};

}  // namespace

ConvertResult run_convert(const ConvertOptions& opt) {
  Converter c(opt);
  return c.run();
}

}  // namespace k3::convert
