// Error statistics of a quantization: per tensor, the dequantized output against the source over
// every element (relative RMSE, cosine similarity, largest absolute error, and an
// importance-weighted relative RMSE when an imatrix is given), bits per weight, and a summary by
// tensor class; printed as a table and written as JSON.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quantize/recipe.h"

namespace k3::quant {

// Sums over elements (x: source, y: dequantized output, w: importance of x's column).
struct ErrorSums {
  double d2 = 0, x2 = 0, y2 = 0, xy = 0, max_abs = 0;  // d = y - x
  double wd2 = 0, wx2 = 0;                              // importance-weighted
  int64_t n = 0;
  void add(const ErrorSums& o);
  double rel_rmse() const { return x2 > 0 ? std::sqrt(d2 / x2) : (d2 > 0 ? INFINITY : 0.0); }
  double cosine() const { return x2 > 0 && y2 > 0 ? xy / std::sqrt(x2 * y2) : (x2 == y2 ? 1.0 : 0.0); }
  double weighted_rel_rmse() const { return wx2 > 0 ? std::sqrt(wd2 / wx2) : 0.0; }
  double rmse() const { return n ? std::sqrt(d2 / static_cast<double>(n)) : 0.0; }
};

struct TensorReport {
  std::string name;
  TensorClass cls;
  GgmlType src_type, type;
  std::string why;
  std::vector<int64_t> ne;
  uint64_t bytes = 0;
  ErrorSums err;
  bool weighted = false;  // importance weights were available for its columns
  bool copied = false;    // bytes copied unchanged (no error)
  double bpw() const { return err.n ? 8.0 * static_cast<double>(bytes) / static_cast<double>(err.n) : 0.0; }
};

struct Report {
  std::string input, output, recipe, imatrix;
  std::vector<TensorReport> tensors;
  double seconds = 0, cpu_seconds = 0;  // wall time; CPU time of the process (all threads)
  uint64_t in_bytes = 0, out_bytes = 0;
  int threads = 1;
  nlohmann::json to_json() const;
  void print_table(FILE* f, bool per_tensor) const;
};

}  // namespace k3::quant
