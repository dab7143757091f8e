#include "common/sysmem.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace k3 {

namespace {

// First number in a file, or 0.
uint64_t read_u64_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  char buf[64] = {0};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok || buf[0] < '0' || buf[0] > '9') return 0;  // "max" (v2, no limit)
  return std::strtoull(buf, nullptr, 10);
}

// cgroup v1: the smallest limit on the path to the root (memory.stat's hierarchical_memory_limit).
uint64_t v1_limit(const std::string& dir) {
  uint64_t limit = read_u64_file(dir + "/memory.limit_in_bytes");
  if (FILE* f = std::fopen((dir + "/memory.stat").c_str(), "r")) {
    char line[256];
    unsigned long long v = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "hierarchical_memory_limit %llu", &v) == 1 && v > 0)
        limit = limit ? std::min<uint64_t>(limit, v) : v;
    std::fclose(f);
  }
  return limit;
}

}  // namespace

std::vector<uint64_t> proc_kb_fields(const char* path, std::initializer_list<std::string_view> keys) {
  std::vector<uint64_t> out(keys.size(), 0);
  if (FILE* f = std::fopen(path, "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      const std::string_view l(line);
      size_t i = 0;
      for (const std::string_view k : keys) {
        if (l.substr(0, k.size()) == k) out[i] = std::strtoull(line + k.size(), nullptr, 10) * 1024;
        ++i;
      }
    }
    std::fclose(f);
  }
  return out;
}

uint64_t mem_available() { return proc_kb_fields("/proc/meminfo", {"MemAvailable:"})[0]; }

uint64_t cgroup_memory_limit() {
  uint64_t lowest = 0;
  // The process's cgroup: "0::/path" (v2) or "N:memory:/path" (v1).
  if (FILE* f = std::fopen("/proc/self/cgroup", "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, f)) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      uint64_t limit = 0;
      if (l.rfind("0::", 0) == 0)
        limit = read_u64_file("/sys/fs/cgroup" + l.substr(3) + "/memory.max");
      else if (const size_t p = l.find(":memory:"); p != std::string::npos)
        limit = v1_limit("/sys/fs/cgroup/memory" + l.substr(p + 8));
      if (limit > 0 && (lowest == 0 || limit < lowest)) lowest = limit;
    }
    std::fclose(f);
  }
  return lowest;
}

uint64_t available_memory() {
  const uint64_t avail = mem_available(), limit = cgroup_memory_limit();
  return limit > 0 && (avail == 0 || limit < avail) ? limit : avail;
}

uint64_t memory_headroom(uint64_t resident) {
  const uint64_t avail = mem_available(), limit = cgroup_memory_limit();
  if (limit == 0) return avail;
  const uint64_t left = limit > resident ? limit - resident : 0;
  return avail > 0 ? std::min(avail, left) : left;
}

}  // namespace k3
