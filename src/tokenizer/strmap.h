// Open-addressing hash maps used on the tokenizer's hot paths: byte string -> int32 (token ranks,
// token texts) and (uint32, uint32) -> value (merge pairs). Keys of StrMap are views into storage
// the caller keeps alive.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace k3::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

inline uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  return x ^ (x >> 33);
}

class StrMap {
 public:
  explicit StrMap(size_t expected = 16) {
    size_t cap = 16;
    while (cap * 3 < expected * 4 + 4) cap <<= 1;
    slots_.assign(cap, Slot{});
  }
  // Inserts or overwrites.
  void put(std::string_view key, int32_t value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    uint64_t h = hash_bytes(key.data(), key.size());
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.value < 0) {
        s = {h, key.data(), static_cast<uint32_t>(key.size()), value};
        ++size_;
        return;
      }
      if (s.hash == h && s.len == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) {
        s.value = value;
        return;
      }
    }
  }
  // -1 if absent (values must be >= 0).
  int32_t get(const char* p, size_t n) const {
    uint64_t h = hash_bytes(p, n);
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.value < 0) return -1;
      if (s.hash == h && s.len == n && std::memcmp(s.data, p, n) == 0) return s.value;
    }
  }
  int32_t get(std::string_view key) const { return get(key.data(), key.size()); }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;
    uint32_t len = 0;
    int32_t value = -1;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.value < 0) continue;
      size_t i = s.hash & mask;
      while (slots_[i].value >= 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// (left, right) symbol pair -> (rank, result symbol).
class PairMap {
 public:
  struct Entry {
    uint64_t key = ~0ull;
    int32_t rank = -1;
    uint32_t result = 0;
  };
  explicit PairMap(size_t expected = 16) {
    size_t cap = 16;
    while (cap * 3 < expected * 4 + 4) cap <<= 1;
    slots_.assign(cap * 2, Entry{});
  }
  // Keeps the first (lowest-rank) entry if the pair repeats.
  void put(uint32_t l, uint32_t r, int32_t rank, uint32_t result) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    uint64_t k = (uint64_t(l) << 32) | r;
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_u64(k) & mask;; i = (i + 1) & mask) {
      if (slots_[i].rank < 0) {
        slots_[i] = {k, rank, result};
        ++size_;
        return;
      }
      if (slots_[i].key == k) return;
    }
  }
  const Entry* get(uint32_t l, uint32_t r) const {
    uint64_t k = (uint64_t(l) << 32) | r;
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_u64(k) & mask;; i = (i + 1) & mask) {
      const Entry& e = slots_[i];
      if (e.rank < 0) return nullptr;
      if (e.key == k) return &e;
    }
  }
  size_t size() const { return size_; }

 private:
  void grow() {
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(old.size() * 2, Entry{});
    size_t mask = slots_.size() - 1;
    for (const Entry& e : old) {
      if (e.rank < 0) continue;
      size_t i = hash_u64(e.key) & mask;
      while (slots_[i].rank >= 0) i = (i + 1) & mask;
      slots_[i] = e;
    }
  }
  std::vector<Entry> slots_;
  size_t size_ = 0;
};

}  // namespace k3::tok
