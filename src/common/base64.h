// The standard base64 alphabet (RFC 4648 §4), shared by the decoders of tokenizer vocabularies and
// image data URLs, which differ in what they accept around it (padding, error messages).
#pragma once

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

}  // namespace k3
