// The CPU the tests run on, in words, for the output of tests whose outcome depends on it (llama.cpp
// picks its CPU backend variant by what the CPU has, and sums some types in other orders there).
#pragma once
#include <cstdio>
#include <string>

#include "tensor/kernels.h"

namespace k3::test {

// "AMD family 26 model 2 (Zen 5)", "Intel family 6 model 143", ...
inline std::string cpu_family() {
  const CpuIdent id = cpu_ident();
  if (id.vendor.empty()) return "unknown CPU";
  const unsigned family = id.family, model = id.model;
  const bool amd = id.amd(), intel = id.intel();
  const char* zen = !amd ? nullptr
                    : family == 0x17 ? "Zen / Zen 2"
                    : family == 0x19 ? (model >= 0x10 && model < 0x20) || model >= 0x60 ? "Zen 4" : "Zen 3"
                    : family == 0x1A ? "Zen 5"
                                     : nullptr;
  char out[96];
  std::snprintf(out, sizeof(out), "%s family %u model %u%s%s%s", amd ? "AMD" : intel ? "Intel" : id.vendor.c_str(),
                family, model, zen ? " (" : "", zen ? zen : "", zen ? ")" : "");
  return out;
}

}  // namespace k3::test
