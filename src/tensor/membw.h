// Memory read-bandwidth probe shared by the kernel microbenchmarks and `k3 bench`: a streaming
// 64-bit sum over a buffer far larger than the last-level cache, split across a thread pool the
// same way a matvec splits its rows, so "fraction of roofline" compares like with like.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/threadpool.h"

namespace k3 {

// Page-aligned buffer (2 MiB alignment, transparent huge pages where the kernel allows them),
// filled once so every page is resident. Aborts if the allocation fails.
class BigBuffer {
 public:
  explicit BigBuffer(size_t bytes);
  ~BigBuffer();
  BigBuffer(const BigBuffer&) = delete;
  BigBuffer& operator=(const BigBuffer&) = delete;
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

// Sum of the 64-bit words of [p, p+n) (n rounded down to 64 bytes; p 16-byte aligned): a read
// stream with four independent accumulators, fast enough to be limited by memory, not by adds.
uint64_t stream_sum(const uint8_t* p, size_t n);

// Seconds for one pass over `buf`, each pool thread reading one contiguous share.
double read_pass(ThreadPool& pool, const BigBuffer& buf);

// The probe's default buffer: 1 GiB, several times any L3 of the machines we run on.
inline constexpr size_t kMembwProbeBytes = size_t{1} << 30;
// Below this a probe would measure caches more than memory.
inline constexpr size_t kMembwProbeMinBytes = size_t{64} << 20;
// The probe buffer for a wish of `want` bytes when `headroom` bytes may still be allocated: want if
// it fits in half the headroom, else that half (rounded down to MiB), or 0 (no probe) when the half
// is below kMembwProbeMinBytes. So a benchmark never pushes its own process out of memory.
size_t membw_probe_size(size_t want, uint64_t headroom);

}  // namespace k3
