// An independent GGUF byte builder for tests: it encodes files straight from gguf-contract.md §1
// without k3's writer, and can produce any malformation (wrong counts, offsets, types, lengths).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gguf_test {

// Value type ids (gguf-contract.md §1).
enum : int32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 };
// Tensor type ids used by the tests, with their block layout (quant-formats.md).
enum : int32_t { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_I8 = 24, T_BF16 = 30, T_MXFP4 = 39 };

// The i-quant, ternary, 1-bit and NVFP4 types (docs/formats.md), each in the hostile cases and
// the valid seed files; one line a type.
struct LowBitType {
  int32_t id;
  const char* name;
  int64_t block;
  uint64_t bytes;
};
inline constexpr LowBitType kLowBitTypes[] = {
    {18, "iq3_xxs", 256, 98}, {21, "iq3_s", 256, 110}, {34, "tq1_0", 256, 54}, {35, "tq2_0", 256, 66},
    {40, "nvfp4", 64, 36},    {41, "q1_0", 128, 18},   {42, "q2_0", 64, 18},
    {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74},
    {22, "iq2_s", 256, 82},
    {19, "iq1_s", 256, 50},
    {29, "iq1_m", 256, 56},
};

inline bool block_of(int32_t type, int64_t* block, uint64_t* bytes) {
  struct B {
    int32_t t;
    int64_t blk;
    uint64_t bytes;
  };
  static const B table[] = {{T_F32, 1, 4},      {T_F16, 1, 2}, {T_Q4_0, 32, 18}, {T_Q8_0, 32, 34},
                            {T_Q4_K, 256, 144}, {T_I8, 1, 1},  {T_BF16, 1, 2},   {T_MXFP4, 32, 17}};
  for (const B& b : table)
    if (b.t == type) {
      *block = b.blk;
      *bytes = b.bytes;
      return true;
    }
  for (const LowBitType& b : kLowBitTypes)
    if (b.id == type) {
      *block = b.block;
      *bytes = b.bytes;
      return true;
    }
  return false;
}

inline uint64_t tensor_bytes(int32_t type, const std::vector<int64_t>& ne) {
  int64_t blk;
  uint64_t bb;
  if (!block_of(type, &blk, &bb) || ne.empty()) return 0;
  uint64_t n = static_cast<uint64_t>(ne[0] / blk) * bb;
  for (size_t i = 1; i < ne.size(); ++i) n *= static_cast<uint64_t>(ne[i]);
  return n;
}

struct Bytes {
  std::vector<uint8_t> v;
  template <class T>
  Bytes& put(T x) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    v.insert(v.end(), b, b + sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s) {
    put<uint64_t>(s.size());
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& b) {
    v.insert(v.end(), b.begin(), b.end());
    return *this;
  }
};

// One encoded KV pair.
template <class T>
std::vector<uint8_t> kv(std::string_view key, int32_t type, T x) {
  Bytes b;
  b.str(key).put<int32_t>(type).put<T>(x);
  return b.v;
}
inline std::vector<uint8_t> kv_str(std::string_view key, std::string_view s) {
  Bytes b;
  b.str(key).put<int32_t>(STR).str(s);
  return b.v;
}
template <class T>
std::vector<uint8_t> kv_arr(std::string_view key, int32_t elem, const std::vector<T>& xs) {
  Bytes b;
  b.str(key).put<int32_t>(ARR).put<int32_t>(elem).put<uint64_t>(xs.size());
  for (const T& x : xs) b.put<T>(x);
  return b.v;
}
inline std::vector<uint8_t> kv_str_arr(std::string_view key, const std::vector<std::string>& xs) {
  Bytes b;
  b.str(key).put<int32_t>(ARR).put<int32_t>(STR).put<uint64_t>(xs.size());
  for (const auto& x : xs) b.str(x);
  return b.v;
}

struct TensorDef {
  std::string name;
  int32_t type = T_F32;
  std::vector<int64_t> ne;
  std::optional<uint32_t> n_dims;  // default ne.size()
  std::optional<uint64_t> offset;  // default: the packed layout
  std::vector<uint8_t> data;       // exactly the tensor's bytes for a valid file
};

struct Doc {
  uint32_t magic = 0x46554747, version = 3;
  std::optional<int64_t> n_tensors, n_kv;  // override the real counts
  std::vector<std::vector<uint8_t>> kvs;
  std::vector<TensorDef> tensors;
  uint32_t alignment = 32;  // layout only; add a general.alignment KV to declare it

  // Section positions of the last build(), for truncation tests.
  size_t header_end = 0, infos_end = 0, data_start = 0;
  std::vector<size_t> kv_start, info_start, tensor_start;

  // Adds a tensor whose data is a deterministic byte pattern.
  TensorDef& add(std::string name, int32_t type, std::vector<int64_t> ne) {
    TensorDef t{std::move(name), type, std::move(ne), {}, {}, {}};
    t.data.resize(tensor_bytes(t.type, t.ne));
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i * 31 + tensors.size() * 7 + 1);
    tensors.push_back(std::move(t));
    return tensors.back();
  }

  std::vector<uint8_t> build() {
    auto pad = [&](uint64_t x) { return (x + alignment - 1) / alignment * alignment; };
    Bytes b;
    b.put(magic).put(version);
    b.put<int64_t>(n_tensors.value_or(static_cast<int64_t>(tensors.size())));
    b.put<int64_t>(n_kv.value_or(static_cast<int64_t>(kvs.size())));
    header_end = b.v.size();
    kv_start.clear(), info_start.clear(), tensor_start.clear();
    for (const auto& k : kvs) {
      kv_start.push_back(b.v.size());
      b.raw(k);
    }
    uint64_t off = 0;
    for (const TensorDef& t : tensors) {
      info_start.push_back(b.v.size());
      b.str(t.name).put<uint32_t>(t.n_dims.value_or(static_cast<uint32_t>(t.ne.size())));
      for (int64_t n : t.ne) b.put<int64_t>(n);
      b.put<int32_t>(t.type).put<uint64_t>(t.offset.value_or(off));
      off += pad(tensor_bytes(t.type, t.ne));
    }
    infos_end = b.v.size();
    b.v.resize(pad(b.v.size()), 0);
    data_start = b.v.size();
    for (const TensorDef& t : tensors) {
      tensor_start.push_back(b.v.size());
      b.raw(t.data);
      b.v.resize(data_start + pad(b.v.size() - data_start), 0);
    }
    return b.v;
  }
};

}  // namespace gguf_test
