// Helpers shared by the chat tests: repository paths and file reading.
#pragma once
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace k3test {

inline std::string source_dir() {
  const char* s = std::getenv("K3_SOURCE_DIR");
  return s ? s : K3_TEST_SOURCE_DIR;
}

// shared/ lies beside the repository (override with K3_SHARED_DIR).
inline std::string shared_dir() {
  const char* s = std::getenv("K3_SHARED_DIR");
  return s ? s : source_dir() + "/../shared";
}

inline bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace k3test
