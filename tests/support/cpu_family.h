// The CPU the tests run on, in words, for the output of tests whose outcome depends on it (llama.cpp
// picks its CPU backend variant by what the CPU has, and sums some types in other orders there).
#pragma once
#include <cpuid.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace k3::test {

// "AMD family 26 model 2 (Zen 5)", "Intel family 6 model 143", ...
inline std::string cpu_family() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return "unknown CPU";
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned base = (a >> 8) & 15, family = base == 15 ? base + ((a >> 20) & 255) : base;
  const unsigned model = base == 6 || base == 15 ? ((a >> 4) & 15) | (((a >> 16) & 15) << 4) : (a >> 4) & 15;
  const bool amd = !std::strcmp(vendor, "AuthenticAMD"), intel = !std::strcmp(vendor, "GenuineIntel");
  const char* zen = !amd ? nullptr
                    : family == 0x17 ? "Zen / Zen 2"
                    : family == 0x19 ? (model >= 0x10 && model < 0x20) || model >= 0x60 ? "Zen 4" : "Zen 3"
                    : family == 0x1A ? "Zen 5"
                                     : nullptr;
  char out[96];
  std::snprintf(out, sizeof(out), "%s family %u model %u%s%s%s", amd ? "AMD" : intel ? "Intel" : vendor, family, model,
                zen ? " (" : "", zen ? zen : "", zen ? ")" : "");
  return out;
}

}  // namespace k3::test
