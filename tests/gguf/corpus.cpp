#include "corpus.h"

#include <algorithm>
#include <functional>

namespace gguf_test {

Doc base_doc() {
  Doc d;
  d.kvs.push_back(kv_str("general.architecture", "kimi-k3"));
  d.kvs.push_back(kv_str("general.name", "tiny"));
  d.kvs.push_back(kv_arr<int32_t>("kimi-k3.attention.head_count_kv", I32, {0, 0, 0, 1}));
  d.kvs.push_back(kv_str_arr("tokenizer.ggml.tokens", {"a", "bc", "def"}));
  d.kvs.push_back(kv<uint32_t>("kimi-k3.block_count", U32, 4));
  d.add("a", T_F32, {8});       // 32 bytes
  d.add("b", T_Q8_0, {32, 2});  // 68 bytes, padded to 96
  d.add("c", T_F32, {3});       // 12 bytes
  return d;
}

namespace {
std::vector<uint8_t> split_kv_no(uint16_t no) { return kv<uint16_t>("split.no", U16, no); }
std::vector<uint8_t> split_kv_count(uint16_t n) { return kv<uint16_t>("split.count", U16, n); }
std::vector<uint8_t> split_kv_total(int32_t n) { return kv<int32_t>("split.tensors.count", I32, n); }
const char* kSplitNames[] = {"s-00001-of-00003.gguf", "s-00002-of-00003.gguf", "s-00003-of-00003.gguf"};
}  // namespace

std::vector<Doc> split_docs() {
  std::vector<Doc> p(3);
  p[0].kvs = {kv_str("general.architecture", "kimi-k3"), split_kv_no(0), split_kv_count(3), split_kv_total(3)};
  p[0].add("a", T_F32, {8});
  for (uint16_t i = 1; i < 3; ++i) p[i].kvs = {split_kv_no(i), split_kv_count(3), split_kv_total(3)};
  p[1].add("b", T_Q8_0, {32, 2});
  p[2].add("c", T_F32, {3});
  return p;
}

std::vector<CaseFile> valid_files() {
  std::vector<CaseFile> out;
  out.push_back({"base.gguf", base_doc().build()});
  Doc empty;
  out.push_back({"empty.gguf", empty.build()});
  Doc aligned = base_doc();
  aligned.alignment = 64;
  aligned.kvs.push_back(kv<uint32_t>("general.alignment", U32, 64));
  out.push_back({"align64.gguf", aligned.build()});
  auto parts = split_docs();
  for (size_t i = 0; i < parts.size(); ++i) out.push_back({kSplitNames[i], parts[i].build()});
  out.push_back({"lowbit.gguf", lowbit_doc().build()});
  return out;
}

Doc lowbit_doc() {
  Doc d = base_doc();
  for (const LowBitType& t : kLowBitTypes) d.add(std::string("w_") + t.name, t.id, {t.block, 2});
  return d;
}

std::vector<Case> hostile_cases() {
  std::vector<Case> out;
  auto add = [&](const std::string& id, const std::string& expect, std::vector<uint8_t> bytes) {
    out.push_back({id, {{id + ".gguf", std::move(bytes)}}, "", expect});
  };
  auto mutate = [&](const std::string& id, const std::string& expect, const std::function<void(Doc&)>& fn) {
    Doc d = base_doc();
    fn(d);
    add(id, expect, d.build());
  };
  auto cut = [&](const std::string& id, const std::string& expect, const std::function<size_t(const Doc&)>& at) {
    Doc d = base_doc();
    std::vector<uint8_t> b = d.build();
    b.resize(at(d));
    add(id, expect, std::move(b));
  };
  auto patch = [&](const std::string& id, const std::string& expect, size_t at, auto value) {
    std::vector<uint8_t> b = base_doc().build();
    std::memcpy(b.data() + at, &value, sizeof(value));
    add(id, expect, std::move(b));
  };
  auto insert_kv = [&](const std::string& id, const std::string& expect, std::vector<uint8_t> kv_bytes) {
    mutate(id, expect, [&](Doc& d) {
      d.kvs.push_back(kv_bytes);
      std::rotate(d.kvs.begin() + 1, d.kvs.end() - 1, d.kvs.end());
    });
  };
  auto tensor = [&](const std::string& id, const std::string& expect, const std::function<void(TensorDef&)>& fn,
                    size_t which = 0) { mutate(id, expect, [&](Doc& d) { fn(d.tensors[which]); }); };

  // Truncated in every section.
  cut("trunc_empty", "file is too small to be GGUF (0 bytes)", [](const Doc&) { return 0; });
  cut("trunc_magic", "file is too small to be GGUF (3 bytes)", [](const Doc&) { return 3; });
  cut("trunc_header", "truncated in header at offset 8", [](const Doc&) { return 12; });
  cut("trunc_kv_key_length", "truncated in key of KV 0 of 5 at offset 24",
      [](const Doc& d) { return d.kv_start[0] + 4; });
  cut("trunc_kv_key", "truncated in key of KV 0 of 5 at offset 24: string length 20",
      [](const Doc& d) { return d.kv_start[0] + 8 + 3; });
  cut("trunc_kv_type", "truncated in value of KV 1 of 5 'general.name'",
      [](const Doc& d) { return d.kv_start[1] + 8 + 12 + 2; });
  cut("trunc_kv_value", "'general.name' at offset", [](const Doc& d) { return d.kv_start[1] + 8 + 12 + 4 + 8 + 2; });
  cut("trunc_array", "array of 4 INT32 elements", [](const Doc& d) { return d.kv_start[2] + 8 + 31 + 4 + 4 + 8 + 6; });
  cut("trunc_string_array", "truncated in value of KV 3 of 5 'tokenizer.ggml.tokens'",
      [](const Doc& d) { return d.kv_start[3] + 8 + 21 + 4 + 4 + 8 + 9 + 8 + 1; });
  cut("trunc_tensor_name", "truncated in name of tensor info 1 of 3", [](const Doc& d) { return d.info_start[1] + 4; });
  cut("trunc_tensor_info", "truncated in tensor info 1 of 3 'b'",
      [](const Doc& d) { return d.info_start[1] + 8 + 1 + 4 + 3; });
  cut("trunc_padding", "truncated in padding", [](const Doc& d) { return d.infos_end + 1; });
  cut("trunc_data", "tensor 'b' data at file offset", [](const Doc& d) { return d.tensor_start[1] + 5; });
  cut("trunc_last_tensor", "tensor 'c' data at file offset", [](const Doc& d) { return d.tensor_start[2] + 11; });

  // Header.
  patch("bad_magic", "bad magic 0x4c4d4747", 0, uint32_t{0x4c4d4747});
  patch("version_0", "GGUF version 0 is not supported", 4, uint32_t{0});
  patch("version_1", "GGUF version 1 is not supported", 4, uint32_t{1});
  patch("version_4", "GGUF version 4 is newer", 4, uint32_t{4});
  patch("version_big_endian", "version 0x03000000 looks byte-swapped", 4, uint32_t{0x03000000});
  patch("huge_tensor_count", "tensor count 1099511627776 cannot fit in the", 8, int64_t{1} << 40);
  patch("negative_tensor_count", "tensor count is negative (-1)", 8, int64_t{-1});
  patch("huge_kv_count", "KV count 4611686018427387904 cannot fit in the", 16, int64_t{1} << 62);
  patch("negative_kv_count", "KV count is negative", 16, int64_t{-5});

  // KVs.
  insert_kv("huge_key_length", "string length 1152921504606846976 exceeds",
            Bytes().put<uint64_t>(1ull << 60).put<uint32_t>(0).v);
  insert_kv("huge_string_value", "string length 18446744073709551615 exceeds",
            Bytes().str("s").put<int32_t>(STR).put<uint64_t>(~0ull).v);
  insert_kv("huge_array_length", "array of 1152921504606846976 INT32 elements",
            Bytes().str("arr").put<int32_t>(ARR).put<int32_t>(I32).put<uint64_t>(1ull << 60).put<int32_t>(1).v);
  insert_kv("huge_string_array", "array of 2305843009213693952 STRING elements",
            Bytes().str("arr").put<int32_t>(ARR).put<int32_t>(STR).put<uint64_t>(1ull << 61).str("x").v);
  insert_kv("unknown_value_type", "'x' has unknown value type 13",
            Bytes().str("x").put<int32_t>(13).put<uint32_t>(0).v);
  insert_kv("negative_value_type", "has unknown value type -1", Bytes().str("x").put<int32_t>(-1).put<uint32_t>(0).v);
  insert_kv("unknown_array_type", "has unknown array element type 42",
            Bytes().str("x").put<int32_t>(ARR).put<int32_t>(42).put<uint64_t>(1).put<uint32_t>(0).v);
  insert_kv("array_of_arrays", "'x' is an array of arrays",
            Bytes().str("x").put<int32_t>(ARR).put<int32_t>(ARR).put<uint64_t>(1).put<int32_t>(I32).put<uint64_t>(0).v);
  insert_kv("bad_bool", "has BOOL byte 2", kv<uint8_t>("flag", BOOL, 2));
  insert_kv("bad_bool_in_array", "has BOOL byte 7", kv_arr<uint8_t>("flags", BOOL, {1, 0, 7}));
  insert_kv("duplicate_key", "duplicate key 'kimi-k3.block_count' (KV 5)", kv<uint32_t>("kimi-k3.block_count", U32, 3));
  insert_kv("empty_key", "KV 1 of 6 has an empty key", kv<uint32_t>("", U32, 3));
  mutate("duplicate_key_with_newline", "duplicate key 'a\\x0ab' (KV 2)", [](Doc& d) {
    d.kvs.insert(d.kvs.begin() + 1, {kv<uint8_t>("a\nb", U8, 1), kv<uint8_t>("a\nb", U8, 2)});
  });
  insert_kv("alignment_zero", "general.alignment is 0, must be a non-zero power of two",
            kv<uint32_t>("general.alignment", U32, 0));
  insert_kv("alignment_48", "general.alignment is 48", kv<uint32_t>("general.alignment", U32, 48));
  insert_kv("alignment_int32", "key 'general.alignment' has wrong type INT32, expected UINT32",
            kv<int32_t>("general.alignment", I32, 32));

  // Tensor infos.
  tensor(
      "duplicate_tensor_name", "duplicate tensor name 'a' (tensor 1)", [](TensorDef& t) { t.name = "a"; }, 1);
  tensor("name_64_bytes", "is 64 bytes, the limit is 63", [](TensorDef& t) { t.name = std::string(64, 'n'); });
  {
    Doc d = base_doc();
    std::vector<uint8_t> b = d.build();
    uint64_t huge = uint64_t{1} << 62;
    std::memcpy(b.data() + d.info_start[0], &huge, sizeof(huge));
    add("name_huge_length",
        "name of tensor info 0 of 3 at offset " + std::to_string(d.info_start[0]) +
            ": string length 4611686018427387904",
        std::move(b));
  }
  tensor("n_dims_0", "tensor 'a' has n_dims 0, expected 1..4", [](TensorDef& t) { t.n_dims = 0; });
  tensor("n_dims_5", "tensor 'a' has n_dims 5, expected 1..4", [](TensorDef& t) { t.n_dims = 5; });
  tensor(
      "negative_ne", "tensor 'b' has negative ne[1] = -2",
      [](TensorDef& t) {
        t.ne = {32, -2};
      },
      1);
  tensor(
      "ne0_not_block_multiple", "tensor 'b' (q8_0) has ne[0] = 33, not a multiple of the block size 32",
      [](TensorDef& t) {
        t.ne = {33, 2};
      },
      1);
  // The i-quant, ternary, 1-bit and NVFP4 types: a row their block does not divide, data cut short.
  for (const LowBitType& lt : kLowBitTypes) {
    const std::string name = lt.name;
    tensor(
        "ne0_not_block_multiple_" + name,
        "tensor 'b' (" + name + ") has ne[0] = " + std::to_string(lt.block / 2) + ", not a multiple of the block size " +
            std::to_string(lt.block),
        [&](TensorDef& t) {
          t.type = lt.id;
          t.ne = {lt.block / 2, 2};
        },
        1);
    Doc d = base_doc();
    d.tensors[1] = TensorDef{"b", lt.id, {lt.block, 2}, {}, {}, std::vector<uint8_t>(2 * lt.bytes, 0x5A)};
    std::vector<uint8_t> b = d.build();
    b.resize(d.tensor_start[1] + lt.bytes + 3);
    add("trunc_data_" + name, "tensor 'b' data at file offset", std::move(b));
  }
  tensor("retired_type", "tensor 'a' has unknown type id 4", [](TensorDef& t) { t.type = 4; });
  tensor(
      "unknown_type", "tensor 'c' has unknown type id 1000", [](TensorDef& t) { t.type = 1000; }, 2);
  tensor("negative_type", "tensor 'a' has unknown type id -1", [](TensorDef& t) { t.type = -1; });
  tensor("element_count_overflow", "tensor 'a' element count overflows", [](TensorDef& t) {
    t.ne = {int64_t{1} << 32, int64_t{1} << 32};
  });
  tensor("byte_size_overflow", "tensor 'a' byte size overflows", [](TensorDef& t) { t.ne = {int64_t{1} << 62}; });
  tensor("tensor_larger_than_file", "tensor 'a' data (offset 0, 4398046511104 bytes) lies beyond the end",
         [](TensorDef& t) { t.ne = {int64_t{1} << 40}; });
  tensor("offset_out_of_range", "tensor 'a' has offset 9223372036854775808, expected 0",
         [](TensorDef& t) { t.offset = uint64_t{1} << 63; });
  tensor(
      "offset_overlap", "tensor 'b' has offset 0, expected 32", [](TensorDef& t) { t.offset = 0; }, 1);
  tensor(
      "offset_gap", "tensor 'b' has offset 64, expected 32", [](TensorDef& t) { t.offset = 64; }, 1);
  tensor(
      "offset_unpadded", "tensor 'c' has offset 100, expected 128", [](TensorDef& t) { t.offset = 100; }, 2);

  // Split sets: the offending part is named in the message.
  auto split = [&](const std::string& id, const std::string& expect, size_t blame,
                   const std::function<void(std::vector<Doc>&)>& fn, int drop = -1) {
    std::vector<Doc> parts = split_docs();
    fn(parts);
    Case c{id, {}, kSplitNames[blame], expect};
    for (size_t i = 0; i < parts.size(); ++i)
      if (static_cast<int>(i) != drop) c.files.push_back({kSplitNames[i], parts[i].build()});
    out.push_back(std::move(c));
  };
  split("split_count_u32", "split key 'split.count' has wrong type UINT32, expected UINT16", 0,
        [](auto& p) { p[0].kvs[2] = kv<uint32_t>("split.count", U32, 3); });
  split("split_no_i32", "split key 'split.no' has wrong type INT32, expected UINT16", 1,
        [](auto& p) { p[1].kvs[0] = kv<int32_t>("split.no", I32, 1); });
  split("split_tensors_count_u32", "split key 'split.tensors.count' has wrong type UINT32, expected INT32", 0,
        [](auto& p) { p[0].kvs[3] = kv<uint32_t>("split.tensors.count", U32, 3); });
  split("split_no_missing", "split key 'split.no' is missing", 2, [](auto& p) { p[2].kvs.erase(p[2].kvs.begin()); });
  split("split_no_mismatch", "split.no is 2, expected 1 for part 2 of 3", 1,
        [](auto& p) { p[1].kvs[0] = split_kv_no(2); });
  split("split_first_not_zero", "split.no is 1: a split set must be opened from its first part", 0,
        [](auto& p) { p[0].kvs[1] = split_kv_no(1); });
  split("split_count_disagrees", "split.count is 4, expected 3", 2, [](auto& p) { p[2].kvs[1] = split_kv_count(4); });
  split(
      "split_missing_part", "split part 3 of 3 is missing: expected file", 0, [](auto&) {}, 2);
  split("split_tensor_count_mismatch", "split.tensors.count is 5 but the 3 parts hold 3 tensors", 0,
        [](auto& p) { p[0].kvs[3] = split_kv_total(5); });
  split("split_duplicate_tensor", "tensor 'a' is also in", 2, [](auto& p) { p[2].tensors[0].name = "a"; });
  split("split_corrupt_part", "bad magic", 1, [](auto& p) { p[1].magic = 0x12345678; });
  Doc misnamed = split_docs()[0];
  out.push_back({"split_bad_file_name",
                 {{"model.gguf", misnamed.build()}},
                 "",
                 "split.count is 3 but the file name does not end in '-00001-of-00003.gguf'"});
  return out;
}

}  // namespace gguf_test
