// Two error tiers: k3::Error for bad input (files, requests, flags) with a message that names
// the file/tensor/field; K3_ASSERT for internal invariants.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace k3 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace k3

#define K3_ASSERT(cond)                                                                    \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "k3: internal error: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
