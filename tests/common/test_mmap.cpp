// MappedFile::copy_to_anonymous (--no-mmap): the same bytes at the same address, and no longer the
// file: a later write to the file does not show through, as it does through the shared mapping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "common/mmap.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {

std::string write_random(const char* name, size_t n, std::vector<uint8_t>& bytes) {
  const std::string path = (fs::temp_directory_path() / (std::string("k3_mmap_") + name + "_" +
                                                         std::to_string(getpid()))).string();
  std::mt19937 rng(7);
  bytes.resize(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), n);
  return path;
}

void overwrite_first_byte(const std::string& path, uint8_t v) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &v, 1, 0), 1);
  ::close(fd);
}

}  // namespace

TEST(MappedFile, CopyToAnonymousKeepsBytesAndAddress) {
  // Larger than a 2 MB page and not a whole number of pages, so the huge-page alignment and the
  // rounded tail both matter.
  for (size_t n : {size_t{1}, size_t{4097}, (size_t{5} << 20) + 123}) {
    std::vector<uint8_t> bytes;
    const std::string path = write_random("copy", n, bytes);
    MappedFile m(path);
    const uint8_t* before = m.data();
    overwrite_first_byte(path, static_cast<uint8_t>(bytes[0] ^ 1));
    EXPECT_EQ(m.data()[0], bytes[0] ^ 1) << "the shared mapping shows the file's new byte";
    bytes[0] ^= 1;
    m.copy_to_anonymous();
    EXPECT_EQ(m.data(), before) << n;
    ASSERT_EQ(m.size(), n);
    EXPECT_EQ(std::memcmp(m.data(), bytes.data(), n), 0) << n;
    overwrite_first_byte(path, static_cast<uint8_t>(bytes[0] ^ 2));
    EXPECT_EQ(m.data()[0], bytes[0]) << "the copy no longer follows the file (" << n << " bytes)";
    fs::remove(path);
  }
}
