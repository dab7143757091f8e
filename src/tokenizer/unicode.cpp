#include "tokenizer/unicode.h"

#include <cstring>
#include <map>
#include <vector>

namespace k3::tok {

#include "tokenizer/unicode_tables.inc"

std::string utf8_encode(uint32_t cp) {
  char b[4];
  size_t n;
  if (cp < 0x80) {
    b[0] = static_cast<char>(cp), n = 1;
  } else if (cp < 0x800) {
    b[0] = static_cast<char>(0xC0 | (cp >> 6)), b[1] = static_cast<char>(0x80 | (cp & 0x3F)), n = 2;
  } else if (cp < 0x10000) {
    b[0] = static_cast<char>(0xE0 | (cp >> 12)), b[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    b[2] = static_cast<char>(0x80 | (cp & 0x3F)), n = 3;
  } else {
    b[0] = static_cast<char>(0xF0 | (cp >> 18)), b[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    b[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), b[3] = static_cast<char>(0x80 | (cp & 0x3F)), n = 4;
  }
  return std::string(b, n);
}

namespace {
// Well-formed UTF-8 (Unicode Table 3-7): returns the sequence length at s[i], or -k for an
// ill-formed maximal subpart of k bytes (k >= 1).
inline int seq_len(const unsigned char* s, size_t n, size_t i) {
  unsigned char c = s[i];
  if (c < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= n) return -k;
    unsigned char d = s[i + k];
    if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return -k;
  }
  return len;
}
}  // namespace

uint32_t utf8_next(std::string_view sv, size_t& i) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  int len = seq_len(s, sv.size(), i);
  if (len < 0) {
    i += -len;
    return 0xFFFD;
  }
  uint32_t cp;
  switch (len) {
    case 1: cp = s[i]; break;
    case 2: cp = ((s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F); break;
    case 3: cp = ((s[i] & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F); break;
    default: cp = ((s[i] & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
  }
  i += len;
  return cp;
}

size_t utf8_valid_prefix(std::string_view sv) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  size_t i = 0, n = sv.size();
  while (i < n) {
    while (i + 8 <= n) {  // ASCII fast path
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    int len = seq_len(s, n, i);
    if (len < 0) return i;
    i += len;
  }
  return n;
}

std::string utf8_sanitize(std::string_view sv) {
  std::string out;
  out.reserve(sv.size() + 8);
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  size_t i = 0;
  while (i < sv.size()) {
    size_t ok = i + utf8_valid_prefix(sv.substr(i));
    out.append(sv.data() + i, ok - i);
    if (ok == sv.size()) break;
    int len = seq_len(s, sv.size(), ok);
    out += "\xEF\xBF\xBD";
    i = ok + (len < 0 ? -len : len);
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view sv) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  size_t n = sv.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead byte
    if (c < 0xC0) return 0;
    int len = seq_len(s, n, n - back);
    return (len < 0 && static_cast<size_t>(-len) == back) ? back : 0;
  }
  return 0;
}

UnicodeTable::UnicodeTable(const uint32_t* runs, size_t n_runs) {
  std::vector<uint8_t> flat(0x110000);
  for (size_t r = 0; r < n_runs; ++r) {
    uint32_t first = runs[r] >> 8, last = r + 1 < n_runs ? (runs[r + 1] >> 8) : 0x110000;
    std::memset(flat.data() + first, static_cast<int>(runs[r] & 0xFF), last - first);
  }
  std::map<std::string, uint16_t> seen;
  for (uint32_t b = 0; b < 0x110000 / 128; ++b) {
    std::string key(reinterpret_cast<const char*>(flat.data() + b * 128), 128);
    auto [it, fresh] = seen.emplace(key, static_cast<uint16_t>(stage2_.size() / 128));
    if (fresh) stage2_.insert(stage2_.end(), key.begin(), key.end());
    stage1_.push_back(it->second);
  }
}

const UnicodeTable& UnicodeTable::get(UnicodeVersion v) {
  if (v == UnicodeVersion::v15_1) {
    static const UnicodeTable t(kUnicode15_1, sizeof(kUnicode15_1) / sizeof(kUnicode15_1[0]));
    return t;
  }
  static const UnicodeTable t(kUnicode17_0, sizeof(kUnicode17_0) / sizeof(kUnicode17_0[0]));
  return t;
}

}  // namespace k3::tok
