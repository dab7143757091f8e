// k3 info: metadata, tensor table and totals of a GGUF file or split set, as text or JSON.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/internal.h"

namespace {

using namespace k3;
using gguf::detail::printable;
using nlohmann::json;

constexpr size_t kShownElems = 8;

const char* kUsage =
    "usage: k3 info FILE [--json]\n"
    "\n"
    "Validates a GGUF file and prints its metadata (arrays summarised: element type, count, first\n"
    "elements), its tensors (name, type, shape, bytes, offset) and totals by type. Given the first\n"
    "part of a split set (NAME-00001-of-000NN.gguf), opens every part and shows each.\n"
    "\n"
    "  --json   print the same content as one JSON object\n";

template <class T>
json scalar_json(const T& x) {
  if constexpr (std::is_same_v<T, gguf::Array>)
    return nullptr;
  else
    return x;
}

json value_json(const gguf::Value& v) {
  json j = {{"type", gguf::value_type_name(v.type)}};
  if (const auto* a = std::get_if<gguf::Array>(&v.v)) {
    j["elem_type"] = gguf::value_type_name(a->elem);
    j["count"] = a->size();
    json first = json::array();
    std::visit(
        [&](const auto& vec) {
          using E = typename std::decay_t<decltype(vec)>::value_type;
          for (size_t i = 0; i < vec.size() && i < kShownElems; ++i) first.push_back(static_cast<E>(vec[i]));
        },
        a->data);
    j["first"] = std::move(first);
  } else {
    j["value"] = std::visit([](const auto& x) { return scalar_json(x); }, v.v);
  }
  return j;
}

struct Totals {
  size_t count = 0;
  uint64_t bytes = 0;
};

int print_json(const gguf::Model& m) {
  json parts = json::array();
  for (const auto& f : m.files()) {
    uint64_t bytes = 0;
    for (const auto& t : f->tensors()) bytes += t.nbytes;
    parts.push_back({{"path", f->path()},
                     {"version", f->version()},
                     {"size", f->size()},
                     {"alignment", f->alignment()},
                     {"data_offset", f->data_offset()},
                     {"n_kv", f->meta().kvs().size()},
                     {"n_tensors", f->tensors().size()},
                     {"tensor_bytes", bytes}});
  }
  json meta = json::array();
  for (const auto& kv : m.meta().kvs()) {
    json j = value_json(kv.value);
    j["key"] = kv.key;
    meta.push_back(std::move(j));
  }
  json tensors = json::array();
  std::map<std::string, Totals> by_type;
  Totals all;
  for (const gguf::TensorInfo* t : m.tensors()) {
    tensors.push_back({{"name", t->name},
                       {"type", type_name(t->type)},
                       {"shape", std::vector<int64_t>(t->ne, t->ne + t->n_dims)},
                       {"bytes", t->nbytes},
                       {"offset", t->offset},
                       {"part", t->file_index + 1}});
    Totals& tt = by_type[type_name(t->type)];
    ++tt.count, ++all.count;
    tt.bytes += t->nbytes, all.bytes += t->nbytes;
  }
  json types = json::object();
  for (const auto& [name, tt] : by_type) types[name] = {{"count", tt.count}, {"bytes", tt.bytes}};
  json out = {{"parts", std::move(parts)},
              {"metadata", std::move(meta)},
              {"tensors", std::move(tensors)},
              {"totals", {{"by_type", std::move(types)}, {"tensors", all.count}, {"bytes", all.bytes}}}};
  // Names and strings from a file need not be UTF-8; replace rather than throw.
  std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

int print_text(const gguf::Model& m) {
  const size_t n_parts = m.files().size();
  for (size_t i = 0; i < n_parts; ++i) {
    const gguf::File& f = *m.files()[i];
    uint64_t bytes = 0;
    for (const auto& t : f.tensors()) bytes += t.nbytes;
    std::printf("%s%s: GGUF v%u, %zu bytes, alignment %u, data at %" PRIu64 ", %zu keys, %zu tensors (%" PRIu64
                " bytes)\n",
                n_parts > 1 ? strprintf("part %zu/%zu ", i + 1, n_parts).c_str() : "", f.path().c_str(), f.version(),
                f.size(), f.alignment(), f.data_offset(), f.meta().kvs().size(), f.tensors().size(), bytes);
  }

  std::printf("\nmetadata (%zu keys%s):\n", m.meta().kvs().size(), n_parts > 1 ? ", from part 1" : "");
  size_t key_w = 0;
  for (const auto& kv : m.meta().kvs()) key_w = std::max(key_w, std::min<size_t>(kv.key.size(), 60));
  for (const auto& kv : m.meta().kvs())
    std::printf("  %-*s %-8s %s\n", static_cast<int>(key_w), printable(kv.key).c_str(),
                gguf::value_type_name(kv.value.type), kv.value.to_string(kShownElems).c_str());

  std::printf("\ntensors (%zu):\n", m.tensors().size());
  size_t name_w = 4;
  for (const auto* t : m.tensors()) name_w = std::max(name_w, t->name.size());
  std::printf("  %6s  %-*s %-8s %-28s %14s %14s%s\n", "#", static_cast<int>(name_w), "name", "type", "shape", "bytes",
              "offset", n_parts > 1 ? "  part" : "");
  std::map<std::string, Totals> by_type;
  Totals all;
  size_t idx = 0;
  for (const gguf::TensorInfo* t : m.tensors()) {
    std::printf("  %6zu  %-*s %-8s %-28s %14" PRIu64 " %14" PRIu64, idx++, static_cast<int>(name_w),
                printable(t->name).c_str(), type_name(t->type), t->shape_string().c_str(), t->nbytes, t->offset);
    if (n_parts > 1) std::printf("  %4u", t->file_index + 1);
    std::printf("\n");
    Totals& tt = by_type[type_name(t->type)];
    ++tt.count, ++all.count;
    tt.bytes += t->nbytes, all.bytes += t->nbytes;
  }

  std::printf("\ntotals by type:\n");
  for (const auto& [name, tt] : by_type)
    std::printf("  %-8s %6zu tensors %16" PRIu64 " bytes\n", name.c_str(), tt.count, tt.bytes);
  std::printf("  %-8s %6zu tensors %16" PRIu64 " bytes\n", "all", all.count, all.bytes);
  return 0;
}

int cmd_info(int argc, char** argv) {
  const char* path = nullptr;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s", kUsage);
      return 0;
    }
    if (!std::strcmp(argv[i], "--json"))
      as_json = true;
    else if (argv[i][0] == '-' || path)
      fail("unexpected argument '%s' (see k3 info --help)", argv[i]);
    else
      path = argv[i];
  }
  if (!path) fail("missing FILE (see k3 info --help)");
  gguf::Model m = gguf::Model::open(path);
  return as_json ? print_json(m) : print_text(m);
}

}  // namespace

K3_COMMAND("info", "show the metadata and tensors of a GGUF file or split set", cmd_info);
