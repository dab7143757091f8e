#include "cli/model_cli.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/error.h"
#include "model/synthetic.h"
#include "tensor/threadpool.h"

namespace k3::cli {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
      fail("--ids: '%s' is not a token id", item.c_str());
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) fail("--ids: empty list");
  return ids;
}

int pick_threads(int flag) {
  if (flag > 0) return flag;
  return ThreadPool::hardware_threads();
}

model::F16Rule parse_f16_rule(const std::string& s) {
  if (s.empty()) return model::default_f16_rule();
  if (s == "amx") return model::F16Rule::Amx;
  if (s == "round") return model::F16Rule::Round;
  fail("--f16-rule: expected 'amx' or 'round', got '%s'", s.c_str());
}

std::string builtin_model_path() {
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/k3";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/k3";
  else fail("cannot find a cache directory for the built-in model (set XDG_CACHE_HOME or HOME, or pass -m)");
  const std::string path = dir + "/synthetic-tiny-v1.gguf";
  std::fprintf(stderr,
               "k3: no model given (-m); using the built-in synthetic model %s.\n"
               "k3: its weights are RANDOM, so the text it writes is meaningless.\n",
               path.c_str());
  if (!std::filesystem::exists(path)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("cannot create %s: %s", dir.c_str(), ec.message().c_str());
    std::fprintf(stderr, "k3: writing it once (a few seconds)...\n");
    model::SynthOptions o = model::synth_preset("tiny");
    o.name = "k3-builtin-tiny";
    model::write_synthetic(path, o);
  }
  return path;
}

}  // namespace k3::cli
