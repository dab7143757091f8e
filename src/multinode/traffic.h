// What one decoded token costs a process of a multi-process run in communication, from the model's
// shapes alone: the exchanges MpiGroup makes and counts (the leader's pass broadcast, the embedding
// lookup, per layer the gathers of kda/mla/ffn/moe, the logits, the stage hand-offs) and the bytes
// this process receives. tests/multinode checks it against the counts of real runs; docs/multinode.md
// applies it to the released model (bench/multinode_plan).
#pragma once
#include <cstdint>

#include "model/hparams.h"
#include "model/placement.h"
#include "tensor/types.h"

namespace k3::multinode {

// Exchanges and the bytes received here by each (the embedding row at its average over the
// vocabulary).
struct Traffic {
  double group = 0, group_bytes = 0;  // collectives among the stage's tensor-parallel group
  double p2p = 0, p2p_bytes = 0;      // point-to-point (stage hand-offs, logits to the leader)
  double world = 0, world_bytes = 0;  // broadcasts from the leader to every process
  double messages() const { return group + p2p + world; }
  double bytes() const { return group_bytes + p2p_bytes + world_bytes; }
};

// The formats the products fed by exchanged block outputs take their input in (model/group.h,
// exchange_format): the trunk's matrices (attn_output, ffn_down, down_shexp) and the routed
// experts' (z into gate/up, the hidden rows into down). F32: they travel as floats.
struct InputFormats {
  GgmlType trunk = GgmlType::F32, experts = GgmlType::F32;
};

// For the process at `where`; `leader`: it is world rank 0.
Traffic decode_traffic(const model::HParams& hp, const model::Placement& where, bool leader,
                       const InputFormats& formats = {});

}  // namespace k3::multinode
