#include "convert/safetensors.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"

namespace k3::st {

using json = nlohmann::json;

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},     {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2},   {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4},   {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8},   {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1},
};

// A name from a file, safe to print on one line.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() > 120) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c != 0x7f && c != '\\')
      out += static_cast<char>(c);
    else
      out += strprintf("\\x%02x", c);
  }
  return out;
}
}  // namespace

const char* dtype_name(DType t) { return kDTypes[static_cast<int>(t)].name; }
size_t dtype_size(DType t) { return kDTypes[static_cast<int>(t)].size; }
bool dtype_is_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32 || t == DType::F64; }

bool dtype_from_name(std::string_view name, DType* out) {
  for (const auto& d : kDTypes)
    if (name == d.name) {
      *out = d.t;
      return true;
    }
  return false;
}

int64_t TensorView::nelements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::unique_ptr<File> File::open(const std::string& path) {
  auto f = std::unique_ptr<File>(new File());
  f->path_ = path;
  f->map_ = MappedFile(path);
  f->base_ = f->map_.data();
  f->size_ = f->map_.size();
  if (f->size_) madvise(const_cast<uint8_t*>(f->base_), f->size_, MADV_SEQUENTIAL);  // tensors are read in order
  f->parse();
  return f;
}

std::unique_ptr<File> File::from_memory(const void* bytes, size_t n, const std::string& name) {
  auto f = std::unique_ptr<File>(new File());
  f->path_ = name;
  f->owned_.assign(static_cast<const uint8_t*>(bytes), static_cast<const uint8_t*>(bytes) + n);
  f->base_ = f->owned_.data();
  f->size_ = n;
  f->parse();
  return f;
}

void File::parse() {
  const char* path = path_.c_str();
  if (size_ < 8) fail("%s: not a safetensors file: %" PRIu64 " bytes, too short for the header length", path, size_);
  uint64_t n = 0;
  std::memcpy(&n, base_, 8);  // little-endian hosts only (x86-64, aarch64)
  if (n > size_ - 8)
    fail("%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes): truncated or not safetensors",
         path, n, size_);
  if (n > kMaxHeaderBytes) fail("%s: header length %" PRIu64 " is implausibly large", path, n);
  data_offset_ = 8 + n;
  const uint64_t data_size = size_ - data_offset_;

  // Count the top-level keys while parsing: nlohmann keeps only the last of duplicate keys.
  std::set<std::string> seen;
  std::string dup;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key) {
      std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && dup.empty()) dup = k;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(reinterpret_cast<const char*>(base_ + 8), reinterpret_cast<const char*>(base_ + 8 + n), cb);
  } catch (const json::exception& e) {
    fail("%s: header is not valid JSON: %s", path, e.what());
  }
  if (!h.is_object()) fail("%s: header is not a JSON object", path);
  if (!dup.empty()) fail("%s: tensor '%s' appears twice in the header", path, printable(dup).c_str());

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const std::string pname = printable(name);
    const char* tn = pname.c_str();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("%s: __metadata__ is not an object", path);
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    if (name.empty()) fail("%s: a tensor has an empty name", path);
    if (!v.is_object()) fail("%s: tensor '%s': entry is not an object", path, tn);
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail("%s: tensor '%s': missing or non-string 'dtype'", path, tn);
    if (sh == v.end() || !sh->is_array()) fail("%s: tensor '%s': missing or non-array 'shape'", path, tn);
    if (off == v.end() || !off->is_array() || off->size() != 2)
      fail("%s: tensor '%s': 'data_offsets' must be an array [begin, end]", path, tn);

    TensorView t;
    t.name = name;
    if (!dtype_from_name(dt->get<std::string>(), &t.dtype))
      fail("%s: tensor '%s': unknown dtype '%s'", path, tn, printable(dt->get<std::string>()).c_str());
    if (sh->size() > 8) fail("%s: tensor '%s': %zu dimensions", path, tn, sh->size());
    uint64_t count = 1;
    bool over = false;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) fail("%s: tensor '%s': shape entries must be non-negative integers", path, tn);
      uint64_t x = d.get<uint64_t>();
      if (x > (uint64_t{1} << 48)) over = true;
      over |= __builtin_mul_overflow(count, x, &count);
      t.shape.push_back(static_cast<int64_t>(x));
    }
    uint64_t bytes = 0;
    over |= __builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(t.dtype)), &bytes);
    if (over) fail("%s: tensor '%s': shape %s overflows", path, tn, t.shape_string().c_str());
    for (const json& o : *off)
      if (!o.is_number_unsigned()) fail("%s: tensor '%s': data_offsets must be non-negative integers", path, tn);
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.end < t.begin) fail("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin", path, tn, t.begin, t.end);
    if (t.end > data_size)
      fail("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] point past the end of the data (%" PRIu64
           " bytes): the file is truncated or the header is wrong",
           path, tn, t.begin, t.end, data_size);
    if (t.end - t.begin != bytes)
      fail("%s: tensor '%s': %s %s needs %" PRIu64 " bytes but data_offsets span %" PRIu64, path, tn,
           dtype_name(t.dtype), t.shape_string().c_str(), bytes, t.end - t.begin);
    t.data = base_ + data_offset_ + t.begin;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorView& a, const TensorView& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < tensors_.size(); ++i)
    if (tensors_[i].begin < tensors_[i - 1].end)
      fail("%s: tensors '%s' and '%s' overlap in the data area", path, printable(tensors_[i - 1].name).c_str(),
           printable(tensors_[i].name).c_str());
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_[tensors_[i].name] = i;
}

const TensorView* File::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& File::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) fail("%s: no tensor '%s'", path_.c_str(), printable(name).c_str());
  return *t;
}

void File::release(const uint8_t* p, uint64_t n) const {
  if (owned_.size() || n == 0) return;
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  uint64_t b = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  constexpr uint64_t kAhead = 64ull << 20;
  const uint64_t at = b - reinterpret_cast<uintptr_t>(base_);
  if (at + kAhead / 2 > ahead_ && ahead_ < size_) {
    const uint64_t from = std::max(ahead_, at), to = std::min(size_, at + kAhead);
    // The kernel reads at most its read-ahead window per request: ask in pieces of that order.
    for (uint64_t a = from; a < to; a += 4ull << 20)
      madvise(const_cast<uint8_t*>(base_) + a, std::min<uint64_t>(4ull << 20, to - a), MADV_WILLNEED);
    ahead_ = to;
  }
}

Index Index::load(const std::string& dir) {
  namespace fs = std::filesystem;
  Index ix;
  ix.dir = dir;
  fs::path ip = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(ip)) {
    fs::path single = fs::path(dir) / "model.safetensors";
    if (!fs::exists(single))
      fail("%s: no model.safetensors.index.json and no model.safetensors: not a safetensors checkpoint", dir.c_str());
    auto f = File::open(single.string());
    ix.shards.push_back("model.safetensors");
    for (const auto& t : f->tensors()) ix.shard_of[t.name] = 0;
    return ix;
  }
  ix.index_path = ip.string();
  const char* path = ix.index_path.c_str();
  json j;
  try {
    std::ifstream in(ip);
    if (!in) fail("%s: cannot open", path);
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("%s: not valid JSON: %s", path, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("%s: no \"weight_map\" object", path);
  std::map<std::string, std::vector<std::string>> by_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail("%s: weight_map entry '%s' is not a file name", path, printable(it.key()).c_str());
    std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail("%s: tensor '%s' names shard '%s', which is not a plain file name in the checkpoint directory", path,
           printable(it.key()).c_str(), printable(file).c_str());
    by_file[file].push_back(it.key());
  }
  if (by_file.empty()) fail("%s: weight_map is empty", path);
  for (auto& [file, names] : by_file) {
    fs::path sp = fs::path(dir) / file;
    std::error_code ec;
    if (!fs::is_regular_file(sp, ec))
      fail("%s: shard '%s' named in the index (for tensor '%s' and %zu more) does not exist in %s", path,
           printable(file).c_str(), printable(names.front()).c_str(), names.size() - 1, dir.c_str());
    int si = static_cast<int>(ix.shards.size());
    ix.shards.push_back(file);
    for (auto& n : names) ix.shard_of[n] = si;
  }
  return ix;
}

}  // namespace k3::st
