// A private directory for a test's files: made by mkdtemp, so tests that ctest runs at once never
// share one, and removed with everything in it by the destructor unless K3_KEEP_TEST_FILES is set.
#pragma once
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace k3::test {

class TempDir {
 public:
  // Under $TMPDIR (else /tmp), or in memory (/dev/shm where it exists) for tests that fsync many
  // files and would spend seconds a file on a slow disk.
  enum class Base { Tmp, Memory };
  explicit TempDir(std::string_view tag = "k3", Base base = Base::Tmp) {
    std::error_code ec;
    std::string root = std::filesystem::temp_directory_path(ec).string();
    if (ec || root.empty()) root = "/tmp";
    if (base == Base::Memory && std::filesystem::is_directory("/dev/shm", ec)) root = "/dev/shm";
    std::string tmpl = root + "/" + std::string(tag) + "-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path_ = tmpl;
  }
  ~TempDir() {
    if (std::getenv("K3_KEEP_TEST_FILES")) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace k3::test
