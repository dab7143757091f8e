// The standard base64 alphabet (RFC 4648 §4), shared by the decoders of tokenizer vocabularies and
// image data URLs, which differ in what they accept around it (padding, error messages), and the
// server's opaque reasoning items.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace k3 {

// The 6-bit value of a base64 character, or -1 for any other character ('=' included).
inline int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Bytes to base64 with '=' padding.
inline std::string base64_encode(std::string_view in) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const size_t n = in.size() - i < 3 ? in.size() - i : 3;
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kDigits[v >> (18 - 6 * k) & 63] : '=';
  }
  return out;
}

}  // namespace k3
