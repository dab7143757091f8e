// Routed experts streamed from disk into a byte-budgeted cache (the dense trunk stays mapped), so
// a model larger than RAM runs at the speed the drive allows. Each MoE layer's chosen experts are
// read (expert_io.h: O_DIRECT, parallel, sorted by offset) into fixed-size slots as soon as the
// router has chosen; the experts already resident are computed while the others arrive, and the
// next layer's experts are prefetched from a cheap prediction (its router applied to this layer's
// input). Eviction follows a CachePolicy (cache_policy.h). Expert bytes are the file's bytes, in
// the file's layout (a repack after each read cost more than the faster rows saved:
// docs/performance.md, "Lane layouts"), so results are identical to the mapped path at every cache
// size, with or without prefetch.
#pragma once
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/sysmem.h"
#include "model/cache_policy.h"
#include "model/expert_io.h"
#include "model/expert_source.h"
#include "model/model.h"

namespace k3::model {

struct ExpertStoreOptions {
  uint64_t budget_bytes = 0;  // 0: auto_expert_budget()
  bool prefetch = true;
  std::string policy = "freq";  // cache_policy.h
  double half_life = 4096;
  int io_threads = 8;                   // pread threads (without io_uring)
  bool io_uring = true;                 // io_uring when built with liburing and allowed
  std::string trace_path;               // record the routing trace here (cache_policy.h format)
  std::vector<std::string> read_paths;  // read experts from these files instead of the model's (tests)
  bool quiet = false;                   // no notices on stderr
};

struct ExpertStats {
  uint64_t hits = 0, misses = 0;  // requested experts found resident (or in flight) / read
  uint64_t prefetched = 0, prefetch_used = 0;
  uint64_t prefetch_skipped = 0;                // layers not prefetched because the drive was busy (> 70 % of the time)
  uint64_t predicted = 0, predicted_right = 0;  // requested experts / of them predicted by the previous layer
  uint64_t bytes_read = 0;
  double read_busy_s = 0;  // time with at least one read in flight
  double stall_s = 0;      // time the forward pass waited for reads
  int64_t capacity = 0, resident = 0, pinned = 0;
  uint64_t slot_bytes = 0, budget_bytes = 0, allocated_bytes = 0;
  bool direct_io = true;
  const char* io_engine = "";
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0; }
  double read_gbps() const { return read_busy_s > 0 ? double(bytes_read) / read_busy_s / 1e9 : 0; }
  double prediction_accuracy() const { return predicted ? double(predicted_right) / double(predicted) : 0; }
};

// "512M", "2G", "1048576", "1.5G" (K/M/G/T: powers of 1024); throws naming the flag value.
uint64_t parse_size(const std::string& s);
// Room left for the OS and scratch when sizing from available memory: 256 MiB or 10 %, whichever
// is larger (a 1 GiB group running a 2 GB model peaked at trunk + cache + 100 MiB).
uint64_t memory_reserve(uint64_t available);
// Cache budget from available_memory() (common/sysmem.h): minus the non-expert weights this
// process holds (the trunk), the state and memory_reserve(). With `sharing` processes on the
// machine (a multi-process run), each sizes from an equal share of the memory.
uint64_t auto_expert_budget(const Model& m, uint64_t state_bytes, int sharing = 1);
// Whether to stream the routed experts when the user did not choose: mapping the weights
// (mapped_bytes, of which expert_bytes are expert stacks) plus the state and memory_reserve() would
// exceed `available`, and there are experts to stream.
bool auto_stream(uint64_t mapped_bytes, uint64_t expert_bytes, uint64_t state_bytes, uint64_t available);
// Bytes of the model's files.
uint64_t file_bytes(const Model& m);
// Bytes of the routed expert stacks this process holds (all of them alone).
uint64_t expert_stack_bytes(const Model& m);

class ExpertStore : public ExpertSource {
 public:
  ExpertStore(const Model& m, const ExpertStoreOptions& o);
  ~ExpertStore() override;

  void request(uint32_t il, std::vector<int32_t>& experts, const float* x, int64_t T) override;
  ExpertMats acquire(uint32_t il, int32_t e) override;
  void done(uint32_t il, int32_t e) override;
  void release(uint32_t il) noexcept override;

  // Loads the experts with the largest weight (per key il * n_expert + e; empty: every layer alike,
  // by descending selection bias) until the cache is full, with a progress bar on stderr unless
  // quiet; pins the first pin_fraction of the capacity (never evicted). Returns experts loaded.
  int64_t warmup(const std::vector<double>& weight, double pin_fraction);
  // Per-key use counts of a recorded trace (for warmup).
  std::vector<double> trace_weights(const RoutingTrace& tr) const;

  ExpertStats stats() const;
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }

 private:
  struct Segment {  // one of gate / up / down of an expert
    const gguf::TensorInfo* info = nullptr;
    uint32_t file = 0;
    uint64_t offset = 0;  // file offset of expert 0 (of its rows this process holds)
    uint64_t bytes = 0;   // per expert
    uint64_t stride = 0;  // file bytes from one expert to the next
    size_t row_bytes = 0;
    int64_t ne0 = 0, ne1 = 0;
    GgmlType type = GgmlType::F32;
  };
  struct Slot {
    uint8_t* buf = nullptr;
    int32_t key = -1;
    enum class St : uint8_t { Free, Loading, Ready, Failed } st = St::Free;
    int parts_left = 0, pins = 0;
    bool prefetched = false, permanent = false;
    bool held = false;  // acquired and not done
    size_t pad[3] = {0, 0, 0};  // where each matrix starts in its aligned read
    size_t seg_at[3] = {0, 0, 0};
    std::string error;
  };
  int32_t alloc_locked();  // a free or evictable slot, or -1
  // Frees the slot of an expert of the current request that is resident but not acquired yet (it
  // goes back to waiting for a slot, to be read again), so that experts taken in another order than
  // request()'s still fit; false if there is none.
  bool unpin_unused_locked();
  void load_locked(int32_t s, int32_t key, std::vector<ReadJob>& jobs);
  void free_locked(int32_t s);
  void on_read(const ReadJob& j, const std::string& err);
  // The next layer's likely experts into guess_ (ascending), from its router on this layer's input.
  void predict(uint32_t il, const float* x, int64_t T);

  const Model& m_;
  ExpertStoreOptions o_;
  int32_t E_ = 0;
  std::vector<std::array<Segment, 3>> seg_;  // per layer (empty for dense layers)
  uint64_t slot_bytes_ = 0, budget_ = 0;
  std::unique_ptr<CachePolicy> policy_;
  std::unique_ptr<ExpertReader> reader_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_, where_;  // where_: key -> slot or -1
  std::vector<int32_t> cur_pins_, pending_;
  std::vector<std::vector<int32_t>> predicted_;  // per layer, from the previous layer's input
  // predict()'s scratch, kept so that a decoded token allocates nothing (request() runs on one
  // thread at a time: the caller of Model::forward)
  std::vector<float> pred_p_;
  std::vector<int32_t> pred_idx_, guess_;
  std::vector<char> pred_mark_;
  std::vector<uint8_t> pred_xq_;  // the router input in its partner format
  // Prefetching spends drive time on mispredictions, so it runs only while the drive has time to
  // spare: the share of wall time with reads in flight, measured over windows of kUtilWindowS.
  static constexpr double kUtilWindowS = 0.5, kMaxUtil = 0.7;
  double util_ = 0, util_busy0_ = 0;
  std::chrono::steady_clock::time_point util_t0_ = std::chrono::steady_clock::now();
  ExpertStats st_;
  std::ofstream trace_;
};

}  // namespace k3::model
