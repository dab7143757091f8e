#include "model/trace.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace k3::model {

DumpTrace::DumpTrace(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) fail("cannot create dump directory '%s': %s", dir_.c_str(), ec.message().c_str());
}

void DumpTrace::record(const char* name, int il, const float* data, int64_t T, int64_t n) {
  auto [it, fresh] = entries_.try_emplace({name, il});
  Entry& e = it->second;
  if (fresh) {
    e.file = il >= 0 ? strprintf("%s.%d.f32", name, il) : strprintf("%s.f32", name);
    e.n = n;
  }
  if (e.n != n) fail("dump: '%s' layer %d changed width from %lld to %lld", name, il, (long long)e.n, (long long)n);
  const std::string path = dir_ + "/" + e.file;
  FILE* f = std::fopen(path.c_str(), fresh ? "wb" : "ab");
  if (!f) fail("cannot write '%s'", path.c_str());
  const size_t count = static_cast<size_t>(T * n);
  const bool ok = std::fwrite(data, sizeof(float), count, f) == count;
  std::fclose(f);
  if (!ok) fail("short write to '%s'", path.c_str());
  e.rows += T;
}

DumpTrace::~DumpTrace() {
  nlohmann::json j;
  j["tensors"] = nlohmann::json::array();
  for (const auto& [k, e] : entries_)
    j["tensors"].push_back({{"name", k.first}, {"layer", k.second}, {"n", e.n}, {"rows", e.rows}, {"file", e.file}});
  if (FILE* f = std::fopen((dir_ + "/index.json").c_str(), "wb")) {
    const std::string s = j.dump(1);
    std::fwrite(s.data(), 1, s.size(), f);
    std::fclose(f);
  }
}

}  // namespace k3::model
