#include "cache/identity.h"

#include <sys/statvfs.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tensor/kernels.h"

namespace k3::cache {

uint64_t template_hash(const std::string& text) { return XXH3_64bits(text.data(), text.size()); }

Identity identity_of(const model::Model& m, uint64_t th, const std::string& compute) {
  XXH3_state_t* hs = XXH3_createState();
  XXH3_64bits_reset(hs);
  auto put = [&](const void* p, size_t n) { XXH3_64bits_update(hs, p, n); };
  const std::string tag = "k3 prompt cache 1";
  put(tag.data(), tag.size());
  for (const auto& f : m.file().files()) put(f->base(), f->data_offset());
  constexpr uint64_t kSample = 4096;
  for (const gguf::TensorInfo* t : m.file().tensors()) {
    const uint64_t n = std::min(kSample, t->nbytes);
    put(t->data, n);
    put(t->data + t->nbytes - n, n);
  }
  put(&th, sizeof th);
  put(compute.data(), compute.size());
  std::string share;
  if (const model::Group* g = m.group(); g && !g->placement().whole()) {
    const model::Placement& p = g->placement();
    share = strprintf(", share %d of %d in stage %d of %d", p.tp_rank, p.tp_size, p.stage, p.n_stages);
    put(share.data(), share.size());
  }
  Identity id;
  id.hash = XXH3_64bits_digest(hs);
  XXH3_freeState(hs);
  const std::string name = m.meta().get_str_opt("general.name").value_or("unnamed");
  id.about = strprintf("model %s (%s), template %016llx, %s%s", name.c_str(), m.file().files().front()->path().c_str(),
                       static_cast<unsigned long long>(th), compute.c_str(), share.c_str());
  return id;
}

std::string compute_of(model::F16Rule rule) {
  return strprintf("kernels %s, f16 rule %s", isa_name(active_isa()), rule == model::F16Rule::Amx ? "amx" : "round");
}

int64_t parse_size(const std::string& s, const char* flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    fail("%s: '%s' is not a size (examples: 0, 512M, 8G)", flag, s.c_str());
  }
  std::string unit = s.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  double mul = 1;
  if (unit.size() > 1) fail("%s: unknown unit in '%s' (K, M, G or T)", flag, s.c_str());
  if (unit.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
      case 'K': mul = 1024.0; break;
      case 'M': mul = 1024.0 * 1024; break;
      case 'G': mul = 1024.0 * 1024 * 1024; break;
      case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
      default: fail("%s: unknown unit in '%s' (K, M, G or T)", flag, s.c_str());
    }
  }
  if (!(v >= 0) || v * mul > 9e18) fail("%s: '%s' is out of range", flag, s.c_str());
  return static_cast<int64_t>(std::llround(v * mul));
}

std::string format_size(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? strprintf("%llu B", static_cast<unsigned long long>(b)) : strprintf("%.1f %s", v, units[u]);
}

namespace {

// A number from a one-line file ("max" and absent files: -1).
int64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return -1;
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    return -1;
  }
}

int64_t meminfo_kib(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line))
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':')
      return std::stoll(line.substr(key.size() + 1));
  return -1;
}

}  // namespace

uint64_t mapped_bytes(const model::Model& m) {
  uint64_t n = 0;
  for (const auto& f : m.file().files()) n += f->size();
  return n;
}

int64_t auto_ram_budget(uint64_t model_bytes, uint64_t reserve) {
  int64_t avail = meminfo_kib("MemAvailable");
  avail = avail < 0 ? 0 : avail * 1024;
  avail = std::max<int64_t>(0, avail - static_cast<int64_t>(model_bytes));
  // cgroup v2, else v1
  int64_t lim = read_number("/sys/fs/cgroup/memory.max"), cur = read_number("/sys/fs/cgroup/memory.current");
  if (lim < 0) lim = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
               cur = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  if (lim > 0 && cur >= 0 && lim < (int64_t{1} << 60)) avail = std::min(avail, std::max<int64_t>(0, lim - cur));
  return std::max<int64_t>(0, avail - static_cast<int64_t>(reserve)) / 2;
}

int64_t auto_disk_budget(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return 0;
  return static_cast<int64_t>(static_cast<uint64_t>(v.f_bavail) * v.f_frsize / 2);
}

}  // namespace k3::cache
