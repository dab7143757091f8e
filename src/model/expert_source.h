// Where the MoE layer finds a routed expert's three matrices. Without a source (Ctx::experts is
// null) they are views into the memory-mapped stacks; an ExpertSource (expert_store.h) serves them
// from a byte-budgeted cache filled by reads from the file, so the model can be larger than RAM.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/matmul.h"

namespace k3::model {

struct ExpertMats {
  WeightView gate, up, down;
};

// Protocol per MoE layer, from one thread: request() as soon as the router has chosen, then
// acquire()/done() per expert (in any order, at most a layer's n_expert_used acquired and not done
// at once), then release(). The values served are exactly the file's, so results never depend on
// the source, its cache size or its prefetching.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // The router of layer il chose `experts` (distinct ids) for the rows x[T][n_embd] (the layer's
  // normed FFN input). Missing experts are read now; `experts` is reordered so that resident ones
  // come first (their compute overlaps the reads of the others).
  virtual void request(uint32_t il, std::vector<int32_t>& experts, const float* x, int64_t T) = 0;
  // Blocks until expert e of layer il is resident; throws k3::Error naming the tensor and file
  // offset when its read failed. The views stay valid until done() or release().
  virtual ExpertMats acquire(uint32_t il, int32_t e) = 0;
  // Expert e's compute is finished; its memory may be reused.
  virtual void done(uint32_t il, int32_t e) = 0;
  // Layer il is finished (also after an error).
  virtual void release(uint32_t il) noexcept = 0;
};

}  // namespace k3::model
