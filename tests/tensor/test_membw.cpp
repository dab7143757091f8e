// The bandwidth probe: its buffer size never exceeds half of what the process may still allocate,
// and a read pass sums what it reads.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "tensor/membw.h"

using namespace k3;

TEST(Membw, ProbeSizeFitsTheHeadroom) {
  const size_t M = size_t{1} << 20, G = size_t{1} << 30;
  EXPECT_EQ(membw_probe_size(G, 24 * G), G);          // plenty: what was asked
  EXPECT_EQ(membw_probe_size(16 * M, 40 * M), 16 * M);  // an explicit small probe that fits
  EXPECT_EQ(membw_probe_size(G, 600 * M + 12345), 300 * M);  // lowered to half, whole MiB
  EXPECT_EQ(membw_probe_size(G, 2 * kMembwProbeMinBytes), kMembwProbeMinBytes);
  EXPECT_EQ(membw_probe_size(G, 2 * kMembwProbeMinBytes - 2 * M), 0u);  // too little left: no probe
  EXPECT_EQ(membw_probe_size(G, 0), 0u);
}

TEST(Membw, ReadPassReadsTheBuffer) {
  BigBuffer b(4 << 20);
  std::iota(b.data(), b.data() + b.size(), uint8_t{0});
  uint64_t want = 0;
  for (size_t i = 0; i < b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    want += w;
  }
  EXPECT_EQ(stream_sum(b.data(), b.size()), want);
  ThreadPool pool(2);
  EXPECT_GT(read_pass(pool, b), 0.0);
}
