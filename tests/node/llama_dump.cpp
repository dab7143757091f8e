// LD_PRELOAD shim for llama.mjs `logits --dump DIR`: llama.cpp's named intermediates in the layout of
// `k3 logits --dump` (DIR/<name>.<layer>.f32, rows = tokens, and DIR/index.json), so that the two
// can be compared op by op (docs/model.md, "Parity").
//
// llama.cpp installs its evaluation callback (null unless asked) through
// ggml_backend_sched_set_eval_callback each time it builds a graph; this library defines that
// function, so libllama's call lands here and installs a callback that asks for every tensor the
// graph builder named "<name>-<layer>" (or inp_embd, result_norm, result_output) and, once
// computed, appends its rows to the file. Asking for a node splits the graph there; the nodes
// themselves are computed as they would be, so the bits are llama.cpp's. Tensors whose element
// is not 4 bytes are skipped; I32 tensors (ffn_moe_topk) are written raw. A name that recurs within
// one graph gets "#k" appended (k = 1, 2, ...).
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace {

struct Fns {
  void (*set_eval_callback)(void*, bool (*)(void*, bool, void*), void*) = nullptr;
  const char* (*get_name)(const void*) = nullptr;
  int64_t (*nelements)(const void*) = nullptr;
  int64_t (*nrows)(const void*) = nullptr;
  size_t (*nbytes)(const void*) = nullptr;
  bool (*is_contiguous)(const void*) = nullptr;
  void (*tensor_get)(const void*, void*, size_t, size_t) = nullptr;
};

struct Entry {
  std::string name, file;
  int layer;
  int64_t n = 0, rows = 0;
};

struct Dump {
  std::string dir;
  Fns f;
  std::mutex mu;
  std::map<std::string, Entry> entries;  // by file name, in first-seen order of keys below
  std::vector<std::string> order;
  std::map<std::string, int> seen;  // occurrences within the current graph

  ~Dump() {
    if (dir.empty()) return;
    std::string json = "{\"tensors\": [";
    for (size_t i = 0; i < order.size(); ++i) {
      const Entry& e = entries[order[i]];
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%s{\"file\": \"%s\", \"layer\": %d, \"n\": %lld, \"name\": \"%s\", \"rows\": %lld}",
                    i ? ", " : "", e.file.c_str(), e.layer, static_cast<long long>(e.n), e.name.c_str(),
                    static_cast<long long>(e.rows));
      json += buf;
    }
    json += "]}\n";
    if (FILE* fp = std::fopen((dir + "/index.json").c_str(), "w")) {
      std::fputs(json.c_str(), fp);
      std::fclose(fp);
    }
  }
};

Dump& dump() {
  static Dump d;
  return d;
}

// "attn_norm-3" -> ("attn_norm", 3); the three global tensors -> layer -1; anything else: false.
bool split_name(const char* full, std::string& name, int& layer) {
  const std::string s = full;
  if (s == "inp_embd" || s == "result_norm" || s == "result_output") {
    name = s, layer = -1;
    return true;
  }
  const size_t dash = s.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == s.size()) return false;
  for (size_t i = dash + 1; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  name = s.substr(0, dash), layer = std::atoi(s.c_str() + dash + 1);
  return true;
}

bool observe(void* t, bool ask, void*) {
  Dump& d = dump();
  std::string name;
  int layer;
  if (!split_name(d.f.get_name(t), name, layer)) return false;
  const int64_t ne = d.f.nelements(t), rows = d.f.nrows(t);
  if (ne <= 0 || d.f.nbytes(t) != 4 * static_cast<size_t>(ne) || !d.f.is_contiguous(t)) return false;
  if (ask) return true;
  std::lock_guard<std::mutex> lock(d.mu);
  if (name == "inp_embd") d.seen.clear();  // a new graph
  const std::string key = name + "." + std::to_string(layer);
  const int k = d.seen[key]++;
  const std::string file = (k ? name + "#" + std::to_string(k) : name) + "." + std::to_string(layer) + ".f32";
  Entry& e = d.entries[file];
  if (e.file.empty()) {
    e = {k ? name + "#" + std::to_string(k) : name, file, layer, ne / rows, 0};
    d.order.push_back(file);
  }
  if (e.n != ne / rows) return true;  // a differently shaped tensor under one name: keep the first
  std::vector<char> buf(4 * static_cast<size_t>(ne));
  d.f.tensor_get(t, buf.data(), 0, buf.size());
  if (FILE* fp = std::fopen((d.dir + "/" + file).c_str(), "ab")) {
    std::fwrite(buf.data(), 1, buf.size(), fp);
    std::fclose(fp);
    e.rows += rows;
  }
  return true;
}

bool resolve(Fns& f) {
  void* h = dlopen("libggml-base.so", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  auto sym = [&](auto& fn, const char* s) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, s)); };
  sym(f.set_eval_callback, "ggml_backend_sched_set_eval_callback");
  sym(f.get_name, "ggml_get_name");
  sym(f.nelements, "ggml_nelements");
  sym(f.nrows, "ggml_nrows");
  sym(f.nbytes, "ggml_nbytes");
  sym(f.is_contiguous, "ggml_is_contiguous");
  sym(f.tensor_get, "ggml_backend_tensor_get");
  return f.set_eval_callback && f.get_name && f.nelements && f.nrows && f.nbytes && f.is_contiguous && f.tensor_get;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void ggml_backend_sched_set_eval_callback(
    void* sched, bool (*callback)(void*, bool, void*), void* user_data) {
  Dump& d = dump();
  static const bool ok = [&] {
    const char* dir = std::getenv("K3_LLAMA_DUMP");
    if (!resolve(d.f)) {
      std::fprintf(stderr, "llama_dump: libggml-base.so is not loaded\n");
      std::abort();
    }
    d.dir = dir ? dir : "";
    return true;
  }();
  (void)ok;
  if (!callback && !d.dir.empty()) return d.f.set_eval_callback(sched, observe, nullptr);
  d.f.set_eval_callback(sched, callback, user_data);
}
