// The other processes that run one model together with this one (src/multinode implements it over MPI).
// Each process holds its share of the weights (placement.h), the blocks compute the rows of that
// share with the single-process arithmetic, and call these where a block's output slices must be
// put back together. Nothing here computes: every output element comes from exactly one process,
// so the results are the bits of a single process at any process count.
#pragma once
#include <cstdint>
#include <span>

#include "model/placement.h"
#include "tensor/types.h"

namespace k3::model {

struct Segment;
struct RunOptions;
struct Bank;
class StateMirror;

// A block output computed in slices: every row holds `local` of its `full` values here (this
// process's share of whole units of `unit` values: a head's width, or single values), as floats
// or already in the format the product it feeds converts its input to (exchange_format).
struct Slice {
  void* data = nullptr;  // [T][local] values on entry, [T][full] on return (room for T rows of full)
  int64_t local = 0, full = 0;
  int64_t unit = 1;
  GgmlType type = GgmlType::F32;
  size_t bytes(int64_t values) const { return row_size(type, values); }
};

// The format in which a block output of `full` values (units of `unit`) that feeds a product
// taking its input in `input` (the weight's vec_dot_type, quant-formats.md §10) travels among
// `tp` processes: `input` for one token when every process's share is whole blocks of it (a format
// converts block by block, so converting the slices gives the bits of converting the whole, in a
// quarter of the bytes of floats for the Q8 formats); else F32.
inline GgmlType exchange_format(GgmlType input, int64_t full, int64_t unit, int tp, int64_t T) {
  if (T != 1 || tp == 1 || input == GgmlType::F32) return GgmlType::F32;
  const int64_t block = type_info(input).block;
  for (int r = 1; r < tp; ++r)
    if (share_begin(full / unit, tp, r) * unit % block != 0) return GgmlType::F32;
  return input;
}

class Group {
 public:
  virtual ~Group() = default;
  virtual const Placement& placement() const = 0;
  // Copies and ends of the leader's states, for the others (null on them).
  virtual StateMirror* states() = 0;
  // Model::forward, once the batch is checked: the leader (the process that talks to the user)
  // sends the batch (with its input rows of n_embd values) to the others, which run what they
  // receive (multinode::follow).
  virtual void announce(std::span<const Segment> batch, const RunOptions& opt, int64_t n_embd) = 0;
  // Every process of the tensor-parallel group gets the full rows of every part, in one exchange
  // (every process passes the same parts; nothing moves in a group of one).
  virtual void gather(std::span<const Slice> parts, int64_t T) = 0;
  // Embedding lookup: each process filled the rows x[t] (of H values) whose ids lie in its share
  // of the V vocabulary rows; afterwards every row is filled (nothing moves in a group of one).
  virtual void gather_lookup(float* x, const int32_t* ids, int64_t T, int64_t H, int64_t V) = 0;
  // Logits of R rows: the processes holding the LM head pass their [R][local] share (local >= 0),
  // the others local < 0. On the leader `out` then holds [R][V]; elsewhere it is unspecified.
  virtual void gather_logits(float* out, int64_t local, int64_t R, int64_t V) = 0;
  // Pipeline stages: the residual stream h [T][H] and the AttnRes bank, from the previous stage
  // and to the next one (same position in the tensor-parallel group).
  virtual void recv_stream(float* h, Bank& bank, int64_t T, int64_t H) = 0;
  virtual void send_stream(const float* h, const Bank& bank, int64_t T, int64_t H) = 0;
  // The end of a forward pass here: sends still in flight complete.
  virtual void end_pass() = 0;
  // Whether any process of the tensor-parallel group streams its routed experts (`here`: this one
  // does), so that all compute a layer's experts k at a time as a store holds them (model/moe.cpp).
  // Agreed at the first call (every process makes it at the same layer of the same pass) and kept:
  // a process's expert source is the same for its life.
  virtual bool any_streams(bool here) = 0;
  // A failure inside a pass the others take part in: every process stops, naming this one.
  [[noreturn]] virtual void abort(const char* what) = 0;
};

}  // namespace k3::model
