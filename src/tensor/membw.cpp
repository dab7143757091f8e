#include "tensor/membw.h"

#include <emmintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace k3 {

BigBuffer::BigBuffer(size_t bytes) : n_(bytes) {
  constexpr size_t kAlign = size_t{2} << 20;
  p_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  if (!p_) std::abort();
  madvise(p_, bytes, MADV_HUGEPAGE);
  std::memset(p_, 1, n_);
}

BigBuffer::~BigBuffer() { std::free(p_); }

uint64_t stream_sum(const uint8_t* p, size_t n) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s)) + static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s)));
}

size_t membw_probe_size(size_t want, uint64_t headroom) {
  if (want <= headroom / 2) return want;
  const size_t fit = static_cast<size_t>(headroom / 2) & ~((size_t{1} << 20) - 1);
  return fit >= kMembwProbeMinBytes ? fit : 0;
}

double read_pass(ThreadPool& pool, const BigBuffer& buf) {
  std::vector<uint64_t> sums(pool.size());
  const auto t0 = std::chrono::steady_clock::now();
  pool.run([&](int ith, int nth) {
    const size_t chunk = buf.size() / nth / 64 * 64;
    sums[ith] = stream_sum(buf.data() + chunk * ith, chunk);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // keep the sums observable so the loads are not optimised away
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  return s;
}

}  // namespace k3
