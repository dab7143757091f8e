#include "quantize/quantizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>

#include "common/error.h"
#include "gguf/writer.h"
#include "quantize/fast_kquants.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"
#include "tensor/threadpool.h"

namespace k3::quant {

namespace {

constexpr int64_t kBandElems = int64_t{1} << 24;  // source elements per band (bounded memory)
constexpr int64_t kChunkElems = int64_t{1} << 15; // elements a thread converts at a time (cache-sized)
constexpr uint64_t kCopyChunk = uint64_t{1} << 24;

gguf::TensorSpec spec_of(const TensorPlan& tp) {
  const gguf::TensorInfo& t = *tp.src;
  return {t.name, tp.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims)};
}

// Tensor indices of each output part.
std::vector<std::vector<size_t>> part_layout(const gguf::Model& in, const Plan& plan, const Options& opt) {
  std::vector<std::vector<size_t>> parts;
  switch (opt.split) {
    case SplitMode::None:
      parts.resize(1);
      for (size_t i = 0; i < plan.tensors.size(); ++i) parts[0].push_back(i);
      break;
    case SplitMode::Keep:
      parts.resize(in.files().size());
      for (size_t i = 0; i < plan.tensors.size(); ++i) parts[plan.tensors[i].src->file_index].push_back(i);
      break;
    case SplitMode::MaxSize: {
      std::vector<gguf::TensorSpec> specs;
      std::map<std::string, size_t> index;
      for (size_t i = 0; i < plan.tensors.size(); ++i) {
        specs.push_back(spec_of(plan.tensors[i]));
        index[plan.tensors[i].src->name] = i;
      }
      const gguf::SplitPlan sp = gguf::plan_split(specs, opt.split_max_bytes, 0);
      for (const auto& p : sp.parts) {
        parts.emplace_back();
        for (const auto& s : p) parts.back().push_back(index.at(s.name));
      }
      break;
    }
  }
  return parts;
}

std::string strip_gguf(const std::string& s) {
  const std::string suf = ".gguf";
  return s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0 ? s.substr(0, s.size() - suf.size())
                                                                                          : s;
}

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Accumulates the error of one row (x source, y dequantized output, w column importance or null).
// Sixteen independent float lanes per block of 256 keep the loop vectorisable; blocks add in double.
void row_error(const float* x, const float* y, const float* w, int64_t n, ErrorSums& e) {
  constexpr int L = 16;
  for (int64_t b = 0; b < n; b += 256) {
    const int64_t m = std::min<int64_t>(256, n - b);
    float d2[L] = {}, x2[L] = {}, y2[L] = {}, xy[L] = {}, mx[L] = {}, wd2[L] = {}, wx2[L] = {};
    int64_t i = 0;
    for (; i + L <= m; i += L)
      for (int k = 0; k < L; ++k) {
        const float xv = x[b + i + k], yv = y[b + i + k], d = yv - xv;
        d2[k] += d * d;
        x2[k] += xv * xv;
        y2[k] += yv * yv;
        xy[k] += xv * yv;
        mx[k] = std::max(mx[k], std::fabs(d));
        if (w) {
          wd2[k] += w[b + i + k] * d * d;
          wx2[k] += w[b + i + k] * xv * xv;
        }
      }
    for (; i < m; ++i) {
      const float xv = x[b + i], yv = y[b + i], d = yv - xv;
      d2[0] += d * d, x2[0] += xv * xv, y2[0] += yv * yv, xy[0] += xv * yv;
      mx[0] = std::max(mx[0], std::fabs(d));
      if (w) wd2[0] += w[b + i] * d * d, wx2[0] += w[b + i] * xv * xv;
    }
    for (int k = 0; k < L; ++k) {
      e.d2 += d2[k], e.x2 += x2[k], e.y2 += y2[k], e.xy += xy[k], e.wd2 += wd2[k], e.wx2 += wx2[k];
      e.max_abs = std::max(e.max_abs, static_cast<double>(mx[k]));
    }
  }
  e.n += n;
}

struct ThreadBuf {
  std::vector<float> x, y;
};

void quantize_tensor(const TensorPlan& tp, gguf::Writer& w, ThreadPool& pool, const Options& opt,
                     std::vector<ThreadBuf>& tbuf, TensorReport& rep) {
  const gguf::TensorInfo& t = *tp.src;
  const int64_t ne0 = t.ne[0], ne1 = t.ne[1], n_mat = t.ne[2] * t.ne[3];
  const size_t in_row = row_size(t.type, ne0), out_row = row_size(tp.type, ne0);
  const QuantKernels& src_k = kernels(t.type);
  const QuantKernels& out_k = kernels(tp.type);
  const ImatrixEntry* qe = opt.imatrix ? opt.imatrix->find(t.name) : nullptr;
  const Imatrix* wim = opt.stats_weights ? opt.stats_weights : opt.imatrix;
  const ImatrixEntry* we = wim ? wim->find(t.name) : nullptr;
  if (qe && (qe->ne0 != ne0 || qe->n_mat != n_mat)) fail("imatrix entry '%s' does not match the tensor", t.name.c_str());
  if (we && (we->ne0 != ne0 || we->n_mat != n_mat)) fail("imatrix entry '%s' does not match the tensor", t.name.c_str());
  rep.weighted = we != nullptr;

  const int64_t band = std::clamp<int64_t>(kBandElems / ne0, 1, ne1);
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElems / ne0);
  std::vector<uint8_t> out(static_cast<size_t>(band) * out_row);
  std::vector<ErrorSums> part(pool.size());
  for (auto& b : tbuf) {
    b.x.resize(static_cast<size_t>(chunk_rows * ne0));
    b.y.resize(static_cast<size_t>(chunk_rows * ne0));
  }
  for (int64_t mat = 0; mat < n_mat; ++mat) {
    const std::vector<float> qv = qe ? Imatrix::values(*qe, mat) : std::vector<float>();
    const std::vector<float> wv = we ? Imatrix::values(*we, mat) : std::vector<float>();
    for (int64_t r0 = 0; r0 < ne1; r0 += band) {
      const int64_t nr = std::min(band, ne1 - r0);
      const uint8_t* src = t.data + static_cast<size_t>(mat * ne1 + r0) * in_row;
      pool.run([&](int ith, int nth) {
        const int64_t per = (nr + nth - 1) / nth;
        const int64_t a = std::min(nr, per * ith), b = std::min(nr, a + per);
        ThreadBuf& tb = tbuf[ith];
        for (int64_t r = a; r < b; r += chunk_rows) {
          const int64_t m = std::min(chunk_rows, b - r);
          for (int64_t i = 0; i < m; ++i) src_k.to_float(src + (r + i) * in_row, tb.x.data() + i * ne0, ne0);
          uint8_t* dst = out.data() + r * out_row;
          quant::quantize_rows(tp.type, tb.x.data(), dst, m, ne0, qe ? qv.data() : nullptr);
          for (int64_t i = 0; i < m; ++i) {
            out_k.to_float(dst + i * out_row, tb.y.data(), ne0);
            row_error(tb.x.data() + i * ne0, tb.y.data(), we ? wv.data() : nullptr, ne0, part[ith]);
          }
        }
      });
      w.write(out.data(), static_cast<size_t>(nr) * out_row);
    }
  }
  for (const auto& p : part) rep.err.add(p);
  if (!std::isfinite(rep.err.x2))
    fail("tensor '%s' holds non-finite values (inf or NaN); refusing to quantize it", t.name.c_str());
}

void copy_tensor(const TensorPlan& tp, gguf::Writer& w, const Imatrix* wim, TensorReport& rep) {
  const gguf::TensorInfo& t = *tp.src;
  for (uint64_t off = 0; off < t.nbytes; off += kCopyChunk) w.write(t.data + off, std::min(kCopyChunk, t.nbytes - off));
  rep.copied = true;
  rep.err.n = t.nelements();
  // No error; x2 = y2 = xy keeps the cosine at 1.
  rep.err.x2 = rep.err.y2 = rep.err.xy = 1.0;
  rep.weighted = wim && wim->find(t.name);
  if (rep.weighted) rep.err.wx2 = 1.0;
}

}  // namespace

std::vector<std::string> output_paths(const gguf::Model& in, const Plan& plan, const std::string& out,
                                      const Options& opt) {
  const size_t n = part_layout(in, plan, opt).size();
  if (opt.split == SplitMode::None || n == 1) return {out};
  if (n > 99999) fail("too many split parts (%zu)", n);
  std::vector<std::string> paths;
  for (size_t i = 0; i < n; ++i) paths.push_back(gguf::split_path(strip_gguf(out), static_cast<int>(i + 1), static_cast<int>(n)));
  return paths;
}

Report quantize_model(const gguf::Model& in, const Plan& plan, const std::string& out, const Options& opt) {
  // ggml's rule (ggml_quantize_requires_imatrix), checked before anything is written.
  for (const TensorPlan& tp : plan.tensors) {
    if (tp.copy() || !ref::requires_imatrix(tp.type) || (opt.imatrix && opt.imatrix->find(tp.src->name))) continue;
    const std::string missing = opt.imatrix ? " (" + opt.imatrix->path + " has no entry for it)" : "";
    fail("tensor '%s': %s needs an importance matrix%s: make one with k3 imatrix -m MODEL -f TEXT -o IMATRIX.gguf and "
         "quantize with --imatrix IMATRIX.gguf", tp.src->name.c_str(), type_name(tp.type), missing.c_str());
  }
  const auto t_start = std::chrono::steady_clock::now();
  const double c_start = cpu_seconds();
  const std::vector<std::vector<size_t>> parts = part_layout(in, plan, opt);
  const std::vector<std::string> paths = output_paths(in, plan, out, opt);

  gguf::Metadata meta = in.meta();
  for (auto k : {gguf::kSplitNo, gguf::kSplitCount, gguf::kSplitTensorsCount}) meta.erase(k);
  meta.set("general.file_type", gguf::Value::u32(plan.file_type));
  meta.set("general.quantization_version", gguf::Value::u32(2));
  if (opt.imatrix) {
    meta.set("quantize.imatrix.file", gguf::Value::str(opt.imatrix->path));
    if (!opt.imatrix->datasets.empty()) meta.set("quantize.imatrix.dataset", gguf::Value::str(opt.imatrix->datasets[0]));
    meta.set("quantize.imatrix.entries_count", gguf::Value::i32(static_cast<int32_t>(opt.imatrix->entries.size())));
    meta.set("quantize.imatrix.chunks_count", gguf::Value::i32(static_cast<int32_t>(opt.imatrix->chunk_count)));
  }

  Report rep;
  rep.input = in.files().front()->path();
  rep.output = paths.size() == 1 ? paths[0] : paths[0] + " (+" + std::to_string(paths.size() - 1) + " parts)";
  rep.recipe = opt.recipe_name;
  rep.imatrix = opt.imatrix ? opt.imatrix->path : "";
  rep.threads = std::max(1, opt.threads);
  ThreadPool pool(rep.threads);
  std::vector<ThreadBuf> tbuf(static_cast<size_t>(pool.size()));

  // A single file goes straight to its name (the writer renames its temporary file at the end);
  // a split set is written as .part files, renamed once every part is complete.
  const bool staged = paths.size() > 1;
  std::vector<std::string> written;
  try {
    size_t done = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      std::vector<gguf::TensorSpec> specs;
      for (size_t i : parts[p]) specs.push_back(spec_of(plan.tensors[i]));
      gguf::Metadata pm = parts.size() > 1 ? gguf::split_metadata(meta, static_cast<uint16_t>(p),
                                                                  static_cast<uint16_t>(parts.size()),
                                                                  static_cast<int32_t>(plan.tensors.size()))
                                           : meta;
      const std::string target = staged ? paths[p] + ".part" : paths[p];
      gguf::Writer w(target, std::move(pm), specs);
      for (size_t i : parts[p]) {
        const TensorPlan& tp = plan.tensors[i];
        if (opt.progress) opt.progress(done, plan.tensors.size(), tp);
        TensorReport tr;
        tr.name = tp.src->name;
        tr.cls = tp.cls;
        tr.src_type = tp.src->type;
        tr.type = tp.type;
        tr.why = tp.why;
        tr.ne.assign(tp.src->ne, tp.src->ne + tp.src->n_dims);
        tr.bytes = tp.out_bytes;
        if (tp.copy()) copy_tensor(tp, w, opt.stats_weights ? opt.stats_weights : opt.imatrix, tr);
        else quantize_tensor(tp, w, pool, opt, tbuf, tr);
        if (opt.done) opt.done(tr);
        rep.tensors.push_back(std::move(tr));
        ++done;
      }
      w.finish();
      written.push_back(target);
    }
    if (staged)
      for (size_t p = 0; p < paths.size(); ++p) std::filesystem::rename(written[p], paths[p]);
  } catch (...) {
    if (staged)
      for (const auto& f : written) std::filesystem::remove(f);
    throw;
  }
  rep.in_bytes = plan.in_bytes;
  rep.out_bytes = plan.out_bytes;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  rep.cpu_seconds = cpu_seconds() - c_start;
  return rep;
}

}  // namespace k3::quant
