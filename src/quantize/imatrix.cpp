#include "quantize/imatrix.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "gguf/writer.h"
#include "model/registry.h"

namespace k3::quant {

namespace {
constexpr const char* kSums = ".in_sum2";
constexpr const char* kCounts = ".counts";

bool strip_suffix(std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  if (s.size() <= n || s.compare(s.size() - n, n, suffix) != 0) return false;
  s.resize(s.size() - n);
  return true;
}
}  // namespace

Imatrix Imatrix::load(const std::string& path) {
  std::unique_ptr<gguf::File> f = gguf::File::open(path);
  const gguf::Metadata& m = f->meta();
  Imatrix im;
  im.path = path;
  const auto type = m.get_str_opt("general.type");
  if (type && *type != "imatrix") fail("%s: general.type is '%s', not an imatrix", path.c_str(), type->c_str());
  if (!m.has("imatrix.chunk_count") || !m.has("imatrix.chunk_size") || !m.has("imatrix.datasets"))
    fail("%s: not an imatrix file (imatrix.chunk_count, imatrix.chunk_size or imatrix.datasets missing)", path.c_str());
  im.chunk_count = m.get_u32("imatrix.chunk_count");
  im.chunk_size = m.get_u32("imatrix.chunk_size");
  const gguf::Array& ds = m.get_array("imatrix.datasets");
  if (ds.elem != gguf::ValueType::STRING) fail("%s: imatrix.datasets is not an array of strings", path.c_str());
  im.datasets = std::get<std::vector<std::string>>(ds.data);

  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : f->tensors()) {
    std::string name = t.name;
    if (strip_suffix(name, kSums)) pairs[name].first = &t;
    else if (strip_suffix(name, kCounts)) pairs[name].second = &t;
  }
  if (pairs.empty()) fail("%s: the imatrix has no entries", path.c_str());
  for (const auto& [name, p] : pairs) {
    const auto [sums, counts] = p;
    if (!sums || !counts) fail("%s: entry '%s' lacks its %s tensor", path.c_str(), name.c_str(), sums ? kCounts : kSums);
    if (sums->type != GgmlType::F32 || counts->type != GgmlType::F32)
      fail("%s: entry '%s' is not F32", path.c_str(), name.c_str());
    const int64_t ne0 = sums->ne[0], n_mat = sums->ne[1] * sums->ne[2] * sums->ne[3];
    if (counts->nelements() != n_mat)
      fail("%s: entry '%s' has %lld matrices but %lld counts", path.c_str(), name.c_str(), static_cast<long long>(n_mat),
           static_cast<long long>(counts->nelements()));
    ImatrixEntry e;
    e.ne0 = ne0;
    e.n_mat = n_mat;
    const float* s = reinterpret_cast<const float*>(sums->data);
    const float* c = reinterpret_cast<const float*>(counts->data);
    e.sums.assign(s, s + ne0 * n_mat);
    e.counts.assign(c, c + n_mat);
    for (double v : e.sums)
      if (!(v >= 0)) fail("%s: entry '%s' has a negative or non-finite sum", path.c_str(), name.c_str());
    im.entries.emplace(name, std::move(e));
  }
  return im;
}

void Imatrix::save(const std::string& out) const {
  gguf::Metadata meta;
  meta.set("general.type", gguf::Value::str("imatrix"));
  gguf::Array ds;
  ds.elem = gguf::ValueType::STRING;
  ds.data = datasets;
  meta.set("imatrix.datasets", gguf::Value::array(ds));
  meta.set("imatrix.chunk_count", gguf::Value::u32(chunk_count));
  meta.set("imatrix.chunk_size", gguf::Value::u32(chunk_size));
  std::vector<gguf::TensorSpec> specs;
  for (const auto& [name, e] : entries) {
    if (name.size() + std::strlen(kSums) > 63)
      fail("imatrix entry '%s': name too long for a GGUF tensor", name.c_str());
    specs.push_back({name + kSums, GgmlType::F32, {e.ne0, e.n_mat}});
    specs.push_back({name + kCounts, GgmlType::F32, {1, e.n_mat}});
  }
  gguf::Writer w(out, std::move(meta), specs);
  std::vector<float> buf;
  for (const auto& [name, e] : entries) {
    buf.assign(e.sums.begin(), e.sums.end());
    w.write(buf.data(), buf.size() * sizeof(float));
    buf.assign(e.counts.begin(), e.counts.end());
    w.write(buf.data(), buf.size() * sizeof(float));
  }
  w.finish();
}

const ImatrixEntry* Imatrix::find(const std::string& name) const {
  auto it = entries.find(name);
  return it == entries.end() ? nullptr : &it->second;
}

std::vector<float> Imatrix::values(const ImatrixEntry& e, int64_t mat) {
  std::vector<float> v(static_cast<size_t>(e.ne0), 1.0f);
  const double c = e.counts[static_cast<size_t>(mat)];
  if (c > 0)
    for (int64_t i = 0; i < e.ne0; ++i) v[i] = static_cast<float>(e.sums[mat * e.ne0 + i] / c);
  return v;
}

void Imatrix::check_model(const gguf::Model& m) const {
  const char* p = path.empty() ? "imatrix" : path.c_str();
  if (entries.empty()) fail("%s: no entries", p);
  for (const auto& [name, e] : entries) {
    const gguf::TensorInfo* t = m.find(name);
    if (!t)
      fail("%s: entry '%s' names no tensor of %s: the imatrix was computed for another model", p, name.c_str(),
           m.files().front()->path().c_str());
    const int64_t n_mat = t->n_dims >= 3 ? t->ne[2] * t->ne[3] : 1;
    if (t->ne[0] != e.ne0 || n_mat != e.n_mat)
      fail("%s: entry '%s' has %lld columns x %lld matrices, the tensor %s has %lld x %lld: the imatrix was computed "
           "for another model",
           p, name.c_str(), static_cast<long long>(e.ne0), static_cast<long long>(e.n_mat), t->shape_string().c_str(),
           static_cast<long long>(t->ne[0]), static_cast<long long>(n_mat));
  }
}

void Imatrix::merge(const Imatrix& o) {
  for (const auto& [name, e] : o.entries) {
    auto it = entries.find(name);
    if (it == entries.end()) {
      entries.emplace(name, e);
      continue;
    }
    ImatrixEntry& d = it->second;
    if (d.ne0 != e.ne0 || d.n_mat != e.n_mat) fail("imatrix merge: entry '%s' has different shapes", name.c_str());
    for (size_t i = 0; i < d.sums.size(); ++i) d.sums[i] += e.sums[i];
    for (size_t i = 0; i < d.counts.size(); ++i) d.counts[i] += e.counts[i];
  }
  chunk_count += o.chunk_count;
  if (!chunk_size) chunk_size = o.chunk_size;
  for (const auto& d : o.datasets)
    if (std::find(datasets.begin(), datasets.end(), d) == datasets.end()) datasets.push_back(d);
}

ImatrixCollector::ImatrixCollector(const model::Model& model) {
  const model::Weights& w = model.weights();
  model::for_each_tensor(model.hparams(), [&](const model::TensorRef& r) {
    const model::Tensor& t = model::bound(w, r);
    if (!t || t.info->n_dims < 2) return;
    const size_t mat = static_cast<size_t>(t.ne[1]) * t.row_bytes();
    ranges_.push_back({t.data, t.data + (t.ne[2] - 1) * t.mat_stride() + mat, t.info, t.mat_stride()});
  });
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
}

void ImatrixCollector::observe(const void* weight_data, const float* x, int64_t T) {
  const auto* p = static_cast<const uint8_t*>(weight_data);
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), p, [](const uint8_t* v, const Range& r) { return v < r.begin; });
  if (it == ranges_.begin()) return;
  --it;
  if (p >= it->end) return;
  const gguf::TensorInfo* t = it->info;
  const int64_t n_mat = t->ne[2] * t->ne[3];
  const int64_t mat = static_cast<int64_t>(static_cast<uint64_t>(p - it->begin) / it->mat_bytes);
  add(t->name, t->ne[0], n_mat, mat, x, T);
}

void ImatrixCollector::add(const std::string& name, int64_t ne0, int64_t n_mat, int64_t mat, const float* x, int64_t T) {
  std::lock_guard<std::mutex> lock(mu_);
  ImatrixEntry& e = im_.entries[name];
  if (e.sums.empty()) {
    e.ne0 = ne0;
    e.n_mat = n_mat;
    e.sums.assign(static_cast<size_t>(ne0 * n_mat), 0.0);
    e.counts.assign(static_cast<size_t>(n_mat), 0.0);
  }
  K3_ASSERT(e.ne0 == ne0 && e.n_mat == n_mat && mat >= 0 && mat < n_mat);
  double* s = &e.sums[static_cast<size_t>(mat * ne0)];
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * ne0;
    for (int64_t c = 0; c < ne0; ++c) s[c] += static_cast<double>(row[c]) * row[c];
  }
  e.counts[static_cast<size_t>(mat)] += static_cast<double>(T);
  ++n_obs_;
}

}  // namespace k3::quant
