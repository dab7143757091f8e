#include "convert/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "vision/registry.h"
#include "convert/digest.h"

namespace k3::convert {

using json = nlohmann::json;

Manifest Manifest::load(const std::string& path) {
  json j;
  {
    std::ifstream in(path);
    if (!in) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail("%s: not valid JSON: %s", path.c_str(), e.what());
    }
  }
  if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_object())
    fail("%s: no \"tensors\" object", path.c_str());
  Manifest m;
  for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it) {
    const json& e = it.value();
    const char* n = it.key().c_str();
    if (!e.is_object()) fail("%s: tensor '%s': entry is not an object", path.c_str(), n);
    ManifestEntry me;
    if (!e.contains("sha256") || !e["sha256"].is_string() || e["sha256"].get<std::string>().size() != 64)
      fail("%s: tensor '%s': missing or malformed \"sha256\"", path.c_str(), n);
    if (!e.contains("type") || !e["type"].is_string()) fail("%s: tensor '%s': missing \"type\"", path.c_str(), n);
    if (!e.contains("ne") || !e["ne"].is_array()) fail("%s: tensor '%s': missing \"ne\"", path.c_str(), n);
    me.sha256 = e["sha256"].get<std::string>();
    me.type = e["type"].get<std::string>();
    for (const json& d : e["ne"]) {
      if (!d.is_number_integer()) fail("%s: tensor '%s': \"ne\" holds a non-integer", path.c_str(), n);
      me.ne.push_back(d.get<int64_t>());
    }
    m.tensors.emplace(it.key(), std::move(me));
  }
  return m;
}

std::string Manifest::to_json() const {
  std::string s = "{\n  \"tensors\": {";
  bool first = true;
  for (const auto& [name, e] : tensors) {
    s += first ? "\n    " : ",\n    ";
    first = false;
    s += json(name).dump() + ": {\"sha256\": \"" + e.sha256 + "\", \"type\": " + json(e.type).dump() + ", \"ne\": [";
    for (size_t i = 0; i < e.ne.size(); ++i) s += (i ? ", " : "") + std::to_string(e.ne[i]);
    s += "]}";
  }
  s += first ? "}\n}\n" : "\n  }\n}\n";
  return s;
}

void Manifest::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const std::string text = to_json();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("%s: cannot create: %s", tmp.c_str(), std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("%s: write failed: %s", tmp.c_str(), std::strerror(e));
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("%s: cannot sync: %s", tmp.c_str(), std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("%s: cannot rename to %s: %s", tmp.c_str(), path.c_str(), std::strerror(errno));
}

namespace {
struct FileResult {
  std::vector<std::string> names;
  std::vector<std::string> problems;
  size_t checked = 0, ok = 0;
  uint64_t bytes = 0;
  int split_no = -1, split_count = 0;
  std::string prefix;
};

void verify_one(const Manifest& m, const std::string& path, FileResult& r, const std::function<void(uint64_t)>& on_bytes) {
  std::unique_ptr<gguf::File> f;
  try {
    f = gguf::File::open(path);
  } catch (const Error& e) {
    r.problems.push_back(strprintf("%s: cannot be read as GGUF: %s", path.c_str(), e.what()));
    return;
  }
  const auto& meta = f->meta();
  if (meta.has(gguf::kSplitCount) && meta.has(gguf::kSplitNo)) {
    try {
      r.split_count = meta.get_u16(gguf::kSplitCount);
      r.split_no = meta.get_u16(gguf::kSplitNo);
    } catch (const Error&) {
    }
  }
  std::unique_ptr<SeqReader> in;
  try {
    in = std::make_unique<SeqReader>(path);
  } catch (const Error& e) {
    r.problems.push_back(e.what());
    return;
  }
  for (const auto& t : f->tensors()) {
    r.names.push_back(t.name);
    ++r.checked;
    auto it = m.tensors.find(t.name);
    if (it == m.tensors.end()) {
      r.problems.push_back(strprintf("%s: tensor '%s' is not in the manifest", path.c_str(), t.name.c_str()));
      continue;
    }
    const ManifestEntry& e = it->second;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    bool bad = false;
    if (e.type != type_name(t.type)) {
      r.problems.push_back(strprintf("%s: tensor '%s' has type %s, manifest says %s", path.c_str(), t.name.c_str(),
                                     type_name(t.type), e.type.c_str()));
      bad = true;
    }
    if (e.ne != ne) {
      r.problems.push_back(strprintf("%s: tensor '%s' has shape %s, manifest says another", path.c_str(),
                                     t.name.c_str(), t.shape_string().c_str()));
      bad = true;
    }
    const std::string h = digest_file_range(Digest::Sha256, *in, f->data_offset() + t.offset, t.nbytes, on_bytes);
    r.bytes += t.nbytes;
    if (h != e.sha256) {
      r.problems.push_back(strprintf("%s: tensor '%s': SHA-256 mismatch (file %.16s..., manifest %.16s...)",
                                     path.c_str(), t.name.c_str(), h.c_str(), e.sha256.c_str()));
      bad = true;
    }
    if (!bad) ++r.ok;
  }
}
}  // namespace

VerifyReport verify_files(const Manifest& m, const std::vector<std::string>& files, int jobs,
                          const std::function<void(uint64_t)>& on_bytes) {
  std::vector<FileResult> res(files.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < files.size();) verify_one(m, files[i], res[i], on_bytes);
  };
  const int n = std::max(1, std::min<int>(jobs, static_cast<int>(files.size())));
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  VerifyReport rep;
  rep.files = files.size();
  std::set<std::string> seen;
  std::map<std::string, std::string> owner;
  // Complete sets: standalone files, or split sets with every part number 0..count-1 present.
  std::map<int, std::set<int>> parts_by_count;
  bool standalone_only = true, complete = true;
  for (size_t i = 0; i < files.size(); ++i) {
    const FileResult& r = res[i];
    rep.tensors_checked += r.checked;
    rep.tensors_ok += r.ok;
    rep.bytes += r.bytes;
    for (const auto& p : r.problems) rep.problems.push_back(p);
    for (const auto& n : r.names) {
      auto [it, fresh] = owner.emplace(n, files[i]);
      if (!fresh)
        rep.problems.push_back(strprintf("%s: tensor '%s' also appears in %s", files[i].c_str(), n.c_str(), it->second.c_str()));
      seen.insert(n);
    }
    if (r.split_count > 1) {
      standalone_only = false;
      parts_by_count[r.split_count].insert(r.split_no);
    }
  }
  if (!standalone_only) {
    if (parts_by_count.size() != 1) complete = false;
    for (auto& [count, parts] : parts_by_count)
      if (static_cast<int>(parts.size()) != count) complete = false;
  }
  // The manifest covers the text set and the mmproj: each side's absent tensors are reported when
  // the files hold that side.
  bool text_given = false, mmproj_given = false;
  for (const auto& n : seen) (vision::is_vision_tensor_name(n) ? mmproj_given : text_given) = true;
  if (complete)
    for (const auto& [name, e] : m.tensors)
      if (!seen.count(name) && (vision::is_vision_tensor_name(name) ? mmproj_given : text_given))
        rep.problems.push_back(strprintf("tensor '%s' is in the manifest but in none of the files", name.c_str()));
  return rep;
}

}  // namespace k3::convert
