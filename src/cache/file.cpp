#include "cache/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

namespace k3::cache {

namespace {

using json = nlohmann::ordered_json;
constexpr char kMagic[8] = {'K', '3', 'P', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kMaxHeader = 16u << 20;

std::string hex(uint64_t v) { return strprintf("%016llx", static_cast<unsigned long long>(v)); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The contiguous row ranges of part j (an MLA layer, or the side rows) at positions [a, b) of p.
template <class F>
void for_rows(const Layout& l, const PathData& p, size_t j, int64_t a, int64_t b, F&& f) {
  int64_t start = 0;
  const size_t w = l.width(j);
  for (const auto& r : p.rows) {
    const int64_t s = std::max(a, start), e = std::min(b, start + r->n);
    if (s < e) f(r->layer(l, j) + (s - start) * w, static_cast<size_t>(e - s) * w * sizeof(float));
    start += r->n;
  }
}

// Visits piece k's bytes in file order.
template <class F>
void for_piece(const Layout& l, const PathData& p, size_t k, F&& f) {
  const int64_t a = k ? p.snaps[k - 1]->pos : 0, b = p.snaps[k]->pos;
  for (size_t j = 0; j < l.parts(); ++j) for_rows(l, p, j, a, b, f);
  f(p.snaps[k]->v.data(), p.snaps[k]->v.bytes());
}

uint64_t piece_bytes(const Layout& l, int64_t a, int64_t b) {
  return (static_cast<uint64_t>(b - a) * l.row_floats() + l.snapshot_floats()) * sizeof(float);
}

// Buffered writes with errno kept for the message.
class Writer {
 public:
  Writer(int fd, const std::string& name) : fd_(fd), name_(name) { buf_.reserve(kBuf); }
  void put(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    if (buf_.size() + n > kBuf) flush();
    if (n >= kBuf) return raw(c, n);
    buf_.insert(buf_.end(), c, c + n);
  }
  void flush() {
    raw(buf_.data(), buf_.size());
    buf_.clear();
  }
  uint64_t written() const { return total_; }

 private:
  static constexpr size_t kBuf = 1 << 20;
  void raw(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = w < 0 ? errno : ENOSPC;
        const bool space = e == ENOSPC || e == EDQUOT || e == EFBIG;
        throw FileError(space ? FileError::NoSpace : FileError::Io,
                        strprintf("%s: write failed: %s", name_.c_str(), std::strerror(e)));
      }
      p += w, n -= static_cast<size_t>(w), total_ += static_cast<uint64_t>(w);
    }
  }
  int fd_;
  const std::string& name_;
  std::vector<char> buf_;
  uint64_t total_ = 0;
};

void pread_all(int fd, void* dst, size_t n, uint64_t off, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw FileError(FileError::Io, strprintf("%s: read failed: %s", path.c_str(), std::strerror(errno)));
    if (r == 0) throw FileError(FileError::Corrupt, path + ": truncated (ends inside its data)");
    p += r, n -= static_cast<size_t>(r), off += static_cast<uint64_t>(r);
  }
}

}  // namespace

uint64_t write_file(const std::string& path, const std::string& tmp, const Layout& l, const Identity& id,
                    const PathData& p, const json& extra) {
  const int64_t n = static_cast<int64_t>(p.ids.size());
  K3_ASSERT(!p.snaps.empty() && p.snaps.back()->pos == n);
  K3_ASSERT(p.content.empty() || p.content.size() == p.ids.size());
  XXH3_state_t* hs = XXH3_createState();
  auto digest = [&](auto&& visit) {
    XXH3_64bits_reset(hs);
    visit([&](const void* d, size_t b) { XXH3_64bits_update(hs, d, b); });
    return hex(XXH3_64bits_digest(hs));
  };
  json pieces = json::array(), snaps = json::array();
  for (size_t k = 0; k < p.snaps.size(); ++k) {
    pieces.push_back(digest([&](auto&& f) { for_piece(l, p, k, f); }));
    snaps.push_back(p.snaps[k]->pos);
  }
  const std::string ids_xxh = digest([&](auto&& f) {
    f(p.ids.data(), p.ids.size() * sizeof(int32_t));
    f(p.content.data(), p.content.size() * sizeof(uint64_t));
  });
  XXH3_freeState(hs);

  json h = {{"kind", "k3-prompt-cache"}, {"identity", hex(id.hash)}, {"about", id.about}, {"layout", hex(l.hash())},
            {"n", n},         {"hashed", !p.content.empty()}, {"snaps", snaps}, {"ids_xxh", ids_xxh},
            {"pieces_xxh", pieces}, {"extra", extra}};
  std::string hj = h.dump();
  std::string head(kMagic, 8);
  const uint32_t ver = kFileVersion, hl = static_cast<uint32_t>(hj.size());
  head.append(reinterpret_cast<const char*>(&ver), 4).append(reinterpret_cast<const char*>(&hl), 4).append(hj);
  const uint64_t hx = XXH3_64bits(head.data(), head.size());

  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int e = errno;
    throw FileError(e == ENOSPC || e == EDQUOT ? FileError::NoSpace : FileError::Io,
                    strprintf("%s: cannot create: %s", tmp.c_str(), std::strerror(e)));
  }
  try {
    Writer w(fd.get(), tmp);
    w.put(head.data(), head.size());
    w.put(&hx, sizeof hx);
    w.put(p.ids.data(), p.ids.size() * sizeof(int32_t));
    w.put(p.content.data(), p.content.size() * sizeof(uint64_t));
    for (size_t k = 0; k < p.snaps.size(); ++k) for_piece(l, p, k, [&](const void* d, size_t b) { w.put(d, b); });
    w.flush();
    if (::fdatasync(fd.get()) != 0) {
      const int e = errno;
      throw FileError(e == ENOSPC || e == EDQUOT ? FileError::NoSpace : FileError::Io,
                      strprintf("%s: sync failed: %s", tmp.c_str(), std::strerror(e)));
    }
    if (::close(fd.release()) != 0)
      throw FileError(FileError::Io, strprintf("%s: close failed: %s", tmp.c_str(), std::strerror(errno)));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw FileError(FileError::Io, strprintf("%s: cannot rename to %s: %s", tmp.c_str(), path.c_str(),
                                               std::strerror(errno)));
    return w.written();
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

FileInfo read_info(const std::string& path, const Layout& l, const Identity& id) {
  auto corrupt = [&](const std::string& what) -> FileError {
    return FileError(FileError::Corrupt, path + ": not a usable prompt-cache file: " + what);
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    throw FileError(e == ENOENT ? FileError::Missing : FileError::Io,
                    strprintf("%s: cannot open: %s", path.c_str(), std::strerror(e)));
  }
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0) throw FileError(FileError::Io, path + ": cannot stat");
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  char fixed[16];
  if (size < sizeof fixed + 8) throw corrupt("too short (" + std::to_string(size) + " bytes)");
  pread_all(fd.get(), fixed, sizeof fixed, 0, path);
  if (std::memcmp(fixed, kMagic, 8) != 0) throw corrupt("wrong magic");
  uint32_t ver = 0, hl = 0;
  std::memcpy(&ver, fixed + 8, 4);
  std::memcpy(&hl, fixed + 12, 4);
  if (ver != kFileVersion)
    throw FileError(FileError::Foreign, strprintf("%s: format version %u (this k3 reads version %u)", path.c_str(),
                                                  ver, kFileVersion));
  if (hl > kMaxHeader || sizeof fixed + hl + 8 > size) throw corrupt("header length " + std::to_string(hl));
  std::string head(fixed, sizeof fixed);
  head.resize(sizeof fixed + hl);
  pread_all(fd.get(), head.data() + sizeof fixed, hl, sizeof fixed, path);
  uint64_t hx = 0;
  pread_all(fd.get(), &hx, sizeof hx, sizeof fixed + hl, path);
  if (XXH3_64bits(head.data(), head.size()) != hx) throw corrupt("header checksum mismatch");
  const json h = json::parse(head.begin() + sizeof fixed, head.end(), nullptr, false);
  if (!h.is_object() || h.value("kind", "") != "k3-prompt-cache") throw corrupt("header is not a k3 prompt-cache header");
  auto str = [&](const char* k) {
    if (!h.contains(k) || !h[k].is_string()) throw corrupt(std::string("header field '") + k + "'");
    return h[k].get<std::string>();
  };
  if (str("identity") != hex(id.hash))
    throw FileError(FileError::Foreign, path + ": made for another model or setup (" + str("about") +
                                            "; this one: " + id.about + ")");
  if (str("layout") != hex(l.hash())) throw corrupt("state layout differs from the model's");
  FileInfo f;
  f.path = path;
  if (!h.contains("n") || !h["n"].is_number_unsigned() || h["n"].get<uint64_t>() > (1ull << 31)) throw corrupt("n");
  const int64_t n = h["n"].get<int64_t>();
  const bool hashed = h.value("hashed", false);
  if (!h.contains("snaps") || !h["snaps"].is_array() || h["snaps"].empty() || !h.contains("pieces_xxh") ||
      !h["pieces_xxh"].is_array() || h["pieces_xxh"].size() != h["snaps"].size())
    throw corrupt("snapshot list");
  uint64_t expect = sizeof fixed + hl + 8 + static_cast<uint64_t>(n) * (hashed ? 12 : 4);
  int64_t prev = 0;
  for (size_t k = 0; k < h["snaps"].size(); ++k) {
    const json& s = h["snaps"][k];
    if (!s.is_number_unsigned() || s.get<int64_t>() <= prev || s.get<int64_t>() > n || !h["pieces_xxh"][k].is_string())
      throw corrupt("snapshot positions");
    f.snaps.push_back(s.get<int64_t>());
    expect += piece_bytes(l, prev, f.snaps.back());
    prev = f.snaps.back();
  }
  if (prev != n) throw corrupt("the last snapshot is not at the end");
  for (const json& x : h["pieces_xxh"]) f.pieces_xxh.push_back(std::strtoull(x.get<std::string>().c_str(), nullptr, 16));
  if (size != expect)
    throw corrupt(strprintf("%llu bytes, the header implies %llu (truncated or appended to)",
                            static_cast<unsigned long long>(size), static_cast<unsigned long long>(expect)));
  f.ids.resize(static_cast<size_t>(n));
  pread_all(fd.get(), f.ids.data(), f.ids.size() * 4, sizeof fixed + hl + 8, path);
  if (hashed) {
    f.content.resize(static_cast<size_t>(n));
    pread_all(fd.get(), f.content.data(), f.content.size() * 8, sizeof fixed + hl + 8 + f.ids.size() * 4, path);
  }
  XXH3_state_t* hs = XXH3_createState();
  XXH3_64bits_reset(hs);
  XXH3_64bits_update(hs, f.ids.data(), f.ids.size() * 4);
  XXH3_64bits_update(hs, f.content.data(), f.content.size() * 8);
  const uint64_t ids_xxh = XXH3_64bits_digest(hs);
  XXH3_freeState(hs);
  if (str("ids_xxh") != hex(ids_xxh)) throw corrupt("token checksum mismatch");
  for (int32_t t : f.ids)
    if (t < 0 || static_cast<size_t>(t) >= l.n_vocab) throw corrupt("token id " + std::to_string(t) + " outside the vocabulary");
  f.data_off = sizeof fixed + hl + 8;
  f.extra = h.contains("extra") ? h["extra"] : json(nullptr);
  f.bytes = size;
  return f;
}

std::vector<std::shared_ptr<Snapshot>> read_pieces(const FileInfo& f, size_t last, const Layout& l,
                                                   model::State& st) {
  K3_ASSERT(last < f.snaps.size());
  std::vector<std::shared_ptr<Snapshot>> out;
  st.reset();
  try {
    Fd fd(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0)
      throw FileError(errno == ENOENT ? FileError::Missing : FileError::Io,
                      strprintf("%s: cannot open: %s", f.path.c_str(), std::strerror(errno)));
    if (f.snaps[last] > st.n_ctx())
      throw FileError(FileError::Corrupt, strprintf("%s: %lld tokens do not fit the context of %lld", f.path.c_str(),
                                                    static_cast<long long>(f.snaps[last]),
                                                    static_cast<long long>(st.n_ctx())));
    uint64_t off = f.data_off + f.ids.size() * 4 + f.content.size() * 8;
    XXH3_state_t* hs = XXH3_createState();
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> guard(hs, XXH3_freeState);
    int64_t a = 0;
    for (size_t k = 0; k <= last; ++k) {
      const int64_t b = f.snaps[k];
      XXH3_64bits_reset(hs);
      for (size_t j = 0; j < l.parts(); ++j) {
        std::vector<float>& kv = l.rows_of(st, j);
        const size_t w = l.width(j);
        kv.resize(static_cast<size_t>(b) * w);
        const size_t nb = static_cast<size_t>(b - a) * w * sizeof(float);
        pread_all(fd.get(), kv.data() + a * w, nb, off, f.path);
        XXH3_64bits_update(hs, kv.data() + a * w, nb);
        off += nb;
      }
      auto s = std::make_shared<Snapshot>();
      s->pos = b;
      s->v = Floats(l.snapshot_floats());
      pread_all(fd.get(), s->v.data(), s->v.bytes(), off, f.path);
      XXH3_64bits_update(hs, s->v.data(), s->v.bytes());
      off += s->v.bytes();
      if (f.pieces_xxh[k] != XXH3_64bits_digest(hs))
        throw FileError(FileError::Corrupt, strprintf("%s: checksum mismatch in the data up to position %lld",
                                                      f.path.c_str(), static_cast<long long>(b)));
      out.push_back(std::move(s));
      a = b;
    }
  } catch (...) {
    st.reset();
    throw;
  }
  return out;
}

}  // namespace k3::cache
