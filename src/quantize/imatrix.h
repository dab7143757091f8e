// Importance matrices: per-column sums of squared matmul inputs (per expert / head for 3-D
// weights) and the number of rows seen, in llama.cpp's imatrix GGUF format so files move between
// k3 and llama-imatrix / llama-quantize:
//   KV      general.type = "imatrix", imatrix.datasets [STRING], imatrix.chunk_count UINT32,
//           imatrix.chunk_size UINT32
//   tensors "<weight name>.in_sum2"  F32 [ne0, n_mat]  sum over rows of x[c]^2
//           "<weight name>.counts"   F32 [1, n_mat]    rows (tokens) that reached each matrix
// The importance of column c of matrix m is in_sum2[m][c] / counts[m] (1 where counts[m] is 0).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/ops.h"

namespace k3::quant {

struct ImatrixEntry {
  int64_t ne0 = 0;             // columns: the weight's row length
  int64_t n_mat = 1;           // matrices: experts or heads of a 3-D weight, 1 for 2-D
  std::vector<double> sums;    // [n_mat][ne0]
  std::vector<double> counts;  // [n_mat]
};

class Imatrix {
 public:
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0, chunk_size = 0;
  std::string path;  // where it was loaded from

  // Reads an imatrix GGUF; errors name the file and the entry.
  static Imatrix load(const std::string& path);
  // Writes it (through a temporary file, renamed when complete).
  void save(const std::string& path) const;

  const ImatrixEntry* find(const std::string& name) const;
  // Importance values of matrix `mat` (ne0 floats), as llama-quantize derives them.
  static std::vector<float> values(const ImatrixEntry& e, int64_t mat);
  // Errors unless every entry names a weight of `m` with its row length and matrix count (an
  // imatrix computed for another model), or when there is no entry at all.
  void check_model(const gguf::Model& m) const;
  // Adds another collection's sums and counts (same shapes), chunks and datasets.
  void merge(const Imatrix& other);
};

// Collects an imatrix from the products a forward pass reports. Weights are identified by their
// data address among the model's weights as it holds them (a 2-D tensor, or one matrix of a 3-D
// stack; in the mapping, or where Model::repack_weights moved them), so the model only needs to
// report (weight data, input rows). Make it after the weights have moved.
class ImatrixCollector : public model::MatmulObserver {
 public:
  explicit ImatrixCollector(const model::Model& model);
  // Collects from every product of a forward pass (RunOptions::observer).
  void on_matmul(const WeightView& w, const float* x, int64_t T) override { observe(w.data, x, T); }
  // y = W x for the T rows x[T][ne0] of the matrix whose data starts at `weight_data`.
  // Unknown addresses (weights not in the file) are ignored. Thread-safe.
  void observe(const void* weight_data, const float* x, int64_t T);
  // The same by name: matrix `mat` of `n_mat`, rows of ne0.
  void add(const std::string& name, int64_t ne0, int64_t n_mat, int64_t mat, const float* x, int64_t T);
  Imatrix& imatrix() { return im_; }
  int64_t observed() const { return n_obs_; }

 private:
  struct Range {
    const uint8_t* begin;
    const uint8_t* end;
    const gguf::TensorInfo* info;
    uint64_t mat_bytes;
  };
  std::vector<Range> ranges_;  // sorted by begin
  Imatrix im_;
  std::mutex mu_;
  int64_t n_obs_ = 0;
};

}  // namespace k3::quant
