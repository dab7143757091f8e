// Helpers shared by the GGUF reader and writer; not part of the public API.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace k3::gguf::detail {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr size_t kMaxName = 63;          // tensor name bytes

// A name or key from a file, made safe for a one-line message: control bytes and backslashes are
// escaped, long names cut, so a hostile name can never break the line or flood the terminal.
std::string printable(std::string_view s, size_t max_len = 80);

inline uint64_t pad_to(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

inline bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace k3::gguf::detail
