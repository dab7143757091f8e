// Direct-I/O sequential files: every byte arrives whatever the chunking, the size is exact (the
// padded direct tail is cut), reads of arbitrary ranges return the file's bytes, and errors name
// the file. Both modes, on the temporary directory and on /dev/shm (tmpfs, where the direct mode
// falls back to buffered I/O).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/seq_file.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {

struct Place {
  std::string dir;
  IoMode mode;
};

std::vector<Place> places() {
  std::vector<std::string> dirs = {fs::temp_directory_path().string()};
  if (fs::is_directory("/dev/shm")) dirs.push_back("/dev/shm");
  std::vector<Place> v;
  for (const auto& d : dirs)
    for (IoMode m : {IoMode::Direct, IoMode::Buffered}) v.push_back({d, m});
  return v;
}

std::string path_in(const std::string& dir, const char* name) {
  return (fs::path(dir) / (std::string("k3_seq_") + name + "_" + std::to_string(getpid()))).string();
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(SeqFile, EveryChunkingGivesTheSameFile) {
  // Sizes around the 4 KiB direct-I/O block and the 8 MiB buffer, and an empty file.
  const size_t kBuf = 8u << 20;
  for (const auto& [dir, mode] : places())
    for (size_t total : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, kBuf - 1, kBuf, kBuf + 1, 2 * kBuf + 12345}) {
      const auto want = random_bytes(total, static_cast<uint32_t>(total));
      const std::string path = path_in(dir, "chunks");
      std::mt19937 rng(7);
      {
        SeqWriter w(path, mode);
        for (size_t off = 0; off < total;) {
          const size_t n = std::min<size_t>(total - off, rng() % 3 == 0 ? rng() % 20 : rng() % (3u << 20));
          w.write(want.data() + off, n);
          off += n;
        }
        EXPECT_EQ(w.size(), total);
        w.finish();
      }
      EXPECT_EQ(slurp(path), want) << dir << ", " << total << " bytes, mode " << static_cast<int>(mode);
      fs::remove(path);
    }
}

TEST(SeqFile, ReaderReturnsAnyRange) {
  for (const auto& [dir, mode] : places()) {
    const size_t total = (17u << 20) + 333;
    const auto want = random_bytes(total, 3);
    const std::string path = path_in(dir, "reader");
    {
      SeqWriter w(path, mode);
      w.write(want.data(), want.size());
      w.finish();
    }
    SeqReader r(path, mode);
    // In order (tensor walk), across chunk boundaries, then backwards, then the last byte.
    std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, 10},        {32, 5000},          {(8u << 20) - 7, 20},
                                                         {9u << 20, 8u << 20}, {100, 4096 * 3 + 1}, {total - 1, 1}};
    for (auto [off, n] : ranges) {
      std::vector<uint8_t> got;
      r.read(off, n, [&](const uint8_t* p, size_t k) { got.insert(got.end(), p, p + k); });
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + static_cast<ptrdiff_t>(off)) && got.size() == n)
          << dir << ": range " << off << "+" << n;
    }
    try {
      r.read(total - 2, 10, [](const uint8_t*, size_t) {});
      ADD_FAILURE() << "read past the end";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("end of file"), std::string::npos) << e.what();
    }
    fs::remove(path);
  }
}

TEST(SeqFile, WriteErrorNamesTheFile) {
  ASSERT_TRUE(fs::exists("/dev/full")) << "no /dev/full";
  std::string msg;
  try {
    SeqWriter w("/dev/full");
    const auto data = random_bytes(20u << 20, 1);
    w.write(data.data(), data.size());
    w.finish();
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("/dev/full"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No space left"), std::string::npos) << msg;
}

TEST(SeqFile, AbandonedWriterDoesNotHang) {
  const std::string path = path_in(places()[0].dir, "abandoned");
  {
    SeqWriter w(path);
    const auto data = random_bytes(30u << 20, 2);
    w.write(data.data(), data.size());
  }
  EXPECT_TRUE(fs::exists(path));  // removing it is the owner's business
  fs::remove(path);
  try {
    SeqWriter w("/nonexistent-dir/x");
    ADD_FAILURE() << "created a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x: cannot create"), std::string::npos) << e.what();
  }
}
