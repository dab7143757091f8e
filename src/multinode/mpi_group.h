// model::Group over MPI: world rank w is position w % tp of the tensor-parallel group of pipeline
// stage w / tp (tp = size / pp), so with mpirun's default mapping (fill each machine in turn) the
// processes of a stage share a machine and the stages span the machines. Slices are put back
// together with one MPI_Allgatherv per call (all the parts of a block at once), the logits with an
// MPI_Gatherv to the stage's first process, the stages hand over with point-to-point messages.
// The leader (world rank 0) broadcasts each pass; the others wait for it with little CPU.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "cache/peers.h"
#include "model/attnres.h"
#include "model/group.h"
#include "model/model.h"
#include "model/state.h"

namespace k3::multinode {

// What the leader sends the others, as int64 words: a header, the operations since the last
// message (copies and ends of states, the prompt cache's: cache/peers.h), each segment (state id,
// context, position, tokens, logits wanted), the input rows' places, the token ids; then, if there
// are input rows, their values. A Cache message carries operations only, and every process answers
// whether the last one (when asked) succeeded.
enum class Op : int64_t { Pass = 1, Stats = 2, Quit = 3, Cache = 4 };
// Operations: [kind, words, payload...]
enum class OpKind : int64_t { CopyState = 1, DropState = 2, Cache = 3 };
struct Message {
  Op op = Op::Quit;
  int64_t f16_rule = 0;
  bool asked = false;  // Cache: the last operation is asked (cache::Peers::ask)
  struct Seg {
    int64_t id, n_ctx, n_past, n, want;
  };
  struct Rows {
    int64_t seg, at, n;  // model::InputRows of segment `seg`, its values next in row_data
  };
  std::vector<int64_t> ops;
  std::vector<Seg> segs;
  std::vector<Rows> rows;
  std::vector<int32_t> ids;
  std::vector<float> row_data;  // [rows][n_embd]
};

struct Counters {
  uint64_t messages = 0, bytes = 0, tokens = 0;
  double seconds = 0;
};

class MpiGroup final : public model::Group, public model::StateMirror, public cache::Peers {
 public:
  explicit MpiGroup(int pp);  // every process of MPI_COMM_WORLD; throws naming a bad --pp
  ~MpiGroup() override;

  // model::Group
  const model::Placement& placement() const override { return place_; }
  model::StateMirror* states() override { return world_rank_ == 0 ? this : nullptr; }
  void announce(std::span<const model::Segment> batch, const model::RunOptions& opt, int64_t n_embd) override;
  void gather(std::span<const model::Slice> parts, int64_t T) override;
  void gather_lookup(float* x, const int32_t* ids, int64_t T, int64_t H, int64_t V) override;
  void gather_logits(float* out, int64_t local, int64_t R, int64_t V) override;
  void recv_stream(float* h, model::Bank& bank, int64_t T, int64_t H) override;
  void send_stream(const float* h, const model::Bank& bank, int64_t T, int64_t H) override;
  void end_pass() override;
  bool any_streams(bool here) override;
  [[noreturn]] void abort(const char* what) override;

  // model::StateMirror (the leader's states)
  uint64_t created() override { return new_id(); }
  void copied(uint64_t from, uint64_t to) override;
  void dropped(uint64_t id) override;

  // cache::Peers (the leader's prompt cache)
  uint64_t new_id() override;
  void post(std::vector<int64_t> op) override;
  bool ask(std::vector<int64_t> op) override;

  // The leader: a message with no pass (Stats, Quit; the queued operations go first). The others:
  // the next message, waiting with little CPU (a server may be idle for hours).
  void send(Op op);
  void receive(Message& m);
  // The others: whether every process carried out a Cache message (`ok`: this one did).
  bool answer(bool ok);
  // Everyone: the values of every process at the leader (world order).
  std::vector<uint64_t> gather_u64(const std::vector<uint64_t>& mine);
  // Everyone: whether `value` is the same on every process; `all` receives each one's (world order).
  bool same(const std::string& value, std::vector<std::string>* all);

  const Counters& counters() const { return cnt_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  void bcast(std::vector<int64_t>& words, bool count);
  void wait(MPI_Request& r, bool quiet);
  void add_time(std::chrono::steady_clock::time_point t0);
  int64_t share(int64_t full, int64_t unit, int r) const;  // first value of process r's share
  int world_of(int stage, int tp_rank) const { return stage * place_.tp_size + tp_rank; }

  model::Placement place_;
  int world_rank_ = 0, world_size_ = 1;
  MPI_Comm tp_comm_ = MPI_COMM_NULL;
  int any_streams_ = -1;  // any_streams(): -1 until agreed
  Counters cnt_;
  std::vector<float> buf_, pack_;
  std::vector<uint8_t> gbuf_, gpack_;  // gather()'s, in bytes
  std::vector<int> counts_, displs_;
  std::vector<int64_t> words_;
  std::vector<float> row_data_;  // the leader's input rows of a pass
  struct Pending {  // a send in flight and its buffer
    MPI_Request req;
    std::vector<float> data;
  };
  std::deque<Pending> sends_;
  void queue(OpKind kind, std::span<const int64_t> payload);
  std::vector<int64_t> take_ops();
  bool send_ops(bool asked);  // a Cache message with the queued operations

  std::mutex mu_;  // the operations below, queued from any thread
  uint64_t next_id_ = 1;
  std::vector<int64_t> ops_;
};

}  // namespace k3::multinode
