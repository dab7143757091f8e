#include "quantize/report.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace k3::quant {

void ErrorSums::add(const ErrorSums& o) {
  d2 += o.d2, x2 += o.x2, y2 += o.y2, xy += o.xy, wd2 += o.wd2, wx2 += o.wx2, n += o.n;
  max_abs = std::max(max_abs, o.max_abs);
}

namespace {

struct ClassSum {
  int tensors = 0;
  uint64_t bytes = 0;
  ErrorSums err;
  double min_cos = 1.0;
  bool weighted = false;
  std::map<std::string, int> types;
};

std::map<std::string, ClassSum> summarize(const Report& r, ClassSum* total) {
  std::map<std::string, ClassSum> m;
  for (const auto& t : r.tensors) {
    for (ClassSum* c : {&m[class_name(t.cls)], total}) {
      ++c->tensors;
      c->bytes += t.bytes;
      c->err.add(t.err);
      c->min_cos = std::min(c->min_cos, t.err.cosine());
      c->weighted = c->weighted || t.weighted;
      ++c->types[type_name(t.type)];
    }
  }
  return m;
}

double bpw(uint64_t bytes, int64_t n) { return n ? 8.0 * static_cast<double>(bytes) / static_cast<double>(n) : 0.0; }

nlohmann::json class_json(const ClassSum& c) {
  nlohmann::json j = {{"tensors", c.tensors},
                      {"elements", c.err.n},
                      {"bytes", c.bytes},
                      {"bpw", bpw(c.bytes, c.err.n)},
                      {"rel_rmse", c.err.rel_rmse()},
                      {"cosine", c.err.cosine()},
                      {"min_cosine", c.min_cos},
                      {"types", c.types}};
  if (c.weighted) j["weighted_rel_rmse"] = c.err.weighted_rel_rmse();
  return j;
}

}  // namespace

nlohmann::json Report::to_json() const {
  nlohmann::json j;
  j["input"] = input;
  j["output"] = output;
  j["recipe"] = recipe;
  if (!imatrix.empty()) j["imatrix"] = imatrix;
  j["seconds"] = seconds;
  j["threads"] = threads;
  j["input_bytes"] = in_bytes;
  j["output_bytes"] = out_bytes;
  j["cpu_seconds"] = cpu_seconds;
  j["input_mb_per_s"] = seconds > 0 ? static_cast<double>(in_bytes) / seconds / 1e6 : 0.0;
  j["input_mb_per_cpu_s"] = cpu_seconds > 0 ? static_cast<double>(in_bytes) / cpu_seconds / 1e6 : 0.0;
  j["stats"] = "every element of every tensor";
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : tensors) {
    nlohmann::json e = {{"name", t.name},
                        {"class", class_name(t.cls)},
                        {"src_type", type_name(t.src_type)},
                        {"type", type_name(t.type)},
                        {"why", t.why},
                        {"ne", t.ne},
                        {"elements", t.err.n},
                        {"bytes", t.bytes},
                        {"bpw", t.bpw()},
                        {"rel_rmse", t.err.rel_rmse()},
                        {"rmse", t.err.rmse()},
                        {"cosine", t.err.cosine()},
                        {"max_abs_err", t.err.max_abs},
                        {"copied", t.copied}};
    if (t.weighted) e["weighted_rel_rmse"] = t.err.weighted_rel_rmse();
    ts.push_back(std::move(e));
  }
  j["tensors"] = std::move(ts);
  ClassSum total;
  const auto classes = summarize(*this, &total);
  nlohmann::json cj = nlohmann::json::object();
  for (const auto& [name, c] : classes) cj[name] = class_json(c);
  j["classes"] = std::move(cj);
  j["total"] = class_json(total);
  return j;
}

void Report::print_table(FILE* f, bool per_tensor) const {
  if (per_tensor) {
    std::fprintf(f, "%-36s %-14s %-7s %7s %10s %9s %11s\n", "tensor", "class", "type", "bpw", "rel_rmse", "cosine",
                 "w_rel_rmse");
    for (const auto& t : tensors) {
      std::fprintf(f, "%-36s %-14s %-7s %7.3f %10.6f %9.6f", t.name.c_str(), class_name(t.cls), type_name(t.type),
                   t.bpw(), t.err.rel_rmse(), t.err.cosine());
      if (t.weighted) std::fprintf(f, " %11.6f", t.err.weighted_rel_rmse());
      std::fputc('\n', f);
    }
    std::fputc('\n', f);
  }
  ClassSum total;
  const auto classes = summarize(*this, &total);
  std::fprintf(f, "%-15s %7s %12s %10s %7s %10s %9s %10s %11s\n", "class", "tensors", "elements", "MiB", "bpw",
               "rel_rmse", "cosine", "min_cos", "w_rel_rmse");
  auto row = [&](const std::string& name, const ClassSum& c) {
    std::fprintf(f, "%-15s %7d %12lld %10.2f %7.3f %10.6f %9.6f %10.6f", name.c_str(), c.tensors,
                 static_cast<long long>(c.err.n), static_cast<double>(c.bytes) / (1 << 20), bpw(c.bytes, c.err.n),
                 c.err.rel_rmse(), c.err.cosine(), c.min_cos);
    if (c.weighted) std::fprintf(f, " %11.6f", c.err.weighted_rel_rmse());
    std::fputc('\n', f);
  };
  for (const auto& [name, c] : classes) row(name, c);
  row("total", total);
  if (seconds > 0)
    std::fprintf(f, "\n%.2f s, %.1f MB/s of input on %d threads; %.2f s of CPU time, %.1f MB/s per busy core\n",
                 seconds, static_cast<double>(in_bytes) / seconds / 1e6, threads, cpu_seconds,
                 cpu_seconds > 0 ? static_cast<double>(in_bytes) / cpu_seconds / 1e6 : 0.0);
}

}  // namespace k3::quant
