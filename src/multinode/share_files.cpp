#include "multinode/share_files.h"

#include <xxhash.h>

#include <filesystem>
#include <regex>

#include "common/error.h"
#include "model/placement.h"

namespace k3::multinode {

std::string share_path(const std::string& prefix, int rank, int processes) {
  return strprintf("%s-rank%d-of-%d.gguf", prefix.c_str(), rank, processes);
}

std::string share_file_for(const std::string& path, int rank, int processes) {
  namespace fs = std::filesystem;
  static const std::regex named(R"((.*)-rank\d+-of-\d+\.gguf)");
  std::smatch m;
  std::string prefix = path;
  if (std::regex_match(path, m, named)) prefix = m[1].str();
  else if (fs::exists(path)) return path;  // a whole file
  const std::string mine = share_path(prefix, rank, processes);
  if (fs::exists(mine)) return mine;
  // a set made for another number of processes names itself
  const fs::path p(prefix);
  const std::string first = p.filename().string() + "-rank0-of-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p.has_parent_path() ? p.parent_path() : fs::path("."), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(first, 0) == 0 && name.ends_with(".gguf"))
      fail("%s: its files are for %s processes (%s); this job has %d", prefix.c_str(),
           name.substr(first.size(), name.size() - first.size() - 5).c_str(), name.c_str(), processes);
  }
  return mine;  // the loader names it missing
}

std::string model_fingerprint(const gguf::Model& file) {
  if (auto v = file.meta().get_str_opt(model::kShareModel)) return *v;
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  for (const auto& f : file.files()) {
    const uint64_t size = f->size(), data = f->data_offset();
    XXH64_update(h, &size, sizeof size);
    XXH64_update(h, f->base(), data);
    const uint64_t n = std::min<uint64_t>(size - data, 65536);
    XXH64_update(h, f->base() + data, n);
    XXH64_update(h, f->base() + size - n, n);
  }
  const uint64_t v = XXH64_digest(h);
  XXH64_freeState(h);
  return strprintf("%016llx", static_cast<unsigned long long>(v));
}

}  // namespace k3::multinode
