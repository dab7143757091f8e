// How the prompt cache reports: warnings (a file skipped, the disk full), and debug lines (where a
// prompt left the cache). The server prints them on stderr, debug lines with --verbose.
#pragma once
#include <functional>
#include <string>

namespace k3::cache {

enum class Level { Warn, Info, Debug };
using Log = std::function<void(Level, const std::string&)>;

}  // namespace k3::cache
