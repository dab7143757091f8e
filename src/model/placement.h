// Which share of the model one process holds when several run it together (src/multinode): the layers
// of its pipeline stage, and, inside the stage's tensor-parallel group, a contiguous share of
// every split axis (registry.h: whole heads of the attention layers, rows of the FFN, expert,
// embedding and head matrices). The loader binds only that share; the default is the whole model.
#pragma once
#include <cstdint>

namespace k3::model {

struct Placement {
  int tp_rank = 0, tp_size = 1;  // this process in its stage's tensor-parallel group
  int stage = 0, n_stages = 1;   // pipeline
  bool whole() const { return tp_size == 1 && n_stages == 1; }
  // As mpirun numbers the processes: stage after stage, each its tensor-parallel group in order.
  int process() const { return stage * tp_size + tp_rank; }
  int processes() const { return tp_size * n_stages; }
  bool operator==(const Placement&) const = default;
};
// The placement of process `rank` of `processes` in `stages` pipeline stages.
inline Placement placement_of(int rank, int processes, int stages) {
  const int tp = processes / stages;
  return {rank % tp, tp, rank / tp, stages};
}

// A file of one process's share (k3 split --tp N, multinode/share_files.h): GGUF keys naming the
// process it was made for and the model it was cut from.
inline constexpr const char* kShareRank = "k3.share.rank";            // u32, as mpirun numbers it
inline constexpr const char* kShareProcesses = "k3.share.processes";  // u32
inline constexpr const char* kShareStages = "k3.share.stages";        // u32, --pp
inline constexpr const char* kShareModel = "k3.share.model";          // the whole file's fingerprint
inline constexpr const char* kShareSource = "k3.share.source";        // the whole file's name

// First of n units in part i of `parts` balanced contiguous parts (sizes differ by at most one).
inline int64_t share_begin(int64_t n, int parts, int i) { return n * i / parts; }

// The layers [first, last) of a pipeline stage: a balanced share of the layer count.
struct LayerRange {
  uint32_t first = 0, last = 0;
  bool has(uint32_t il) const { return il >= first && il < last; }
};
inline LayerRange stage_layers(uint32_t n_layer, const Placement& p) {
  return {static_cast<uint32_t>(share_begin(n_layer, p.n_stages, p.stage)),
          static_cast<uint32_t>(share_begin(n_layer, p.n_stages, p.stage + 1))};
}

}  // namespace k3::model
