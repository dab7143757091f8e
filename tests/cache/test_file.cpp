// The prompt-cache file: a written path reads back bit for bit; a flipped bit anywhere (magic,
// version, header, checksum, ids, rows, snapshots), a truncation at any length, bytes appended, a
// file made for another model or setup: each is refused with a message naming the file and the
// fault, and nothing of it reaches a state (which is left empty).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cache/file.h"
#include "driver.h"
#include "helpers.h"
#include "model/synthetic.h"

using namespace k3;
using namespace k3::cache;
using namespace k3::test;

namespace {

struct Written {
  model::HParams hp = model::synth_hparams(model::synth_preset("tiny"));
  Layout l = Layout::of(hp);
  Identity id{0x1234, "model test"};
  std::vector<int32_t> ids;
  std::optional<model::State> st;
  std::vector<std::shared_ptr<Snapshot>> snaps;
  std::string path;

  explicit Written(const std::string& name) {
    path = fresh_dir("file_" + name) + "/entry.k3pc";
    ids = prompt_ids(40, static_cast<int32_t>(hp.n_vocab), 3);
    st.emplace(hp, 128);
    uint32_t v = 1;
    auto fill = [&](std::vector<float>& x) {
      for (float& f : x) f = static_cast<float>((v = v * 1664525u + 1013904223u) >> 8) / 65536.0f;
    };
    for (uint32_t il : l.kda) fill(st->layers[il].conv), fill(st->layers[il].rec);
    for (uint32_t il : l.mla) st->layers[il].kv.resize(ids.size() * l.row), fill(st->layers[il].kv);
    st->set_n_past(static_cast<int64_t>(ids.size()));
    std::vector<float> logits(hp.n_vocab);
    fill(logits);
    PathData p;
    p.ids = ids;
    p.rows = {copy_rows(l, *st, 0, 15), copy_rows(l, *st, 15, 40)};
    for (int64_t pos : {9, 40}) {  // a snapshot inside the first rows block and one at the end
      model::State part(hp, 128);
      for (uint32_t il : l.mla) part.layers[il].kv.assign(st->layers[il].kv.begin(), st->layers[il].kv.begin() + pos * l.row);
      for (uint32_t il : l.kda) part.layers[il].rec.assign(st->layers[il].rec.size(), static_cast<float>(pos));
      part.set_n_past(pos);
      snaps.push_back(take_snapshot(l, pos == 40 ? *st : part, logits));
    }
    p.snaps = {snaps[0], snaps[1]};
    write_file(path, path + ".tmp", l, id, p, nlohmann::ordered_json{{"note", "hi"}});
  }
  std::vector<char> bytes() const {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  }
  void put(const std::vector<char>& b) const {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
  }
};

// The file read whole (header, ids, both pieces); throws FileError.
void read_all(const Written& w, model::State& into) {
  const FileInfo f = read_info(w.path, w.l, w.id);
  read_pieces(f, f.snaps.size() - 1, w.l, into);
}

}  // namespace

TEST(CacheFile, RoundTripIsBitExact) {
  Written w("roundtrip");
  const FileInfo f = read_info(w.path, w.l, w.id);
  EXPECT_EQ(f.ids, w.ids);
  EXPECT_EQ(f.snaps, (std::vector<int64_t>{9, 40}));
  EXPECT_EQ(f.extra["note"], "hi");
  model::State st(w.hp, 128);
  auto snaps = read_pieces(f, 1, w.l, st);
  ASSERT_EQ(snaps.size(), 2u);
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(0, std::memcmp(snaps[k]->v.data(), w.snaps[k]->v.data(), w.snaps[k]->v.bytes())) << "snapshot " << k;
  apply_snapshot(w.l, st, *snaps[1], nullptr);
  EXPECT_TRUE(same_bits(st, *w.st));
  // Only the first piece: the rows up to 9.
  model::State part(w.hp, 128);
  read_pieces(f, 0, w.l, part);
  for (uint32_t il : w.l.mla) EXPECT_EQ(part.layers[il].kv.size(), 9 * w.l.row);
  EXPECT_FALSE(std::filesystem::exists(w.path + ".tmp"));
}

TEST(CacheFile, EveryFlippedBitIsRefused) {
  Written w("flip");
  const std::vector<char> good = w.bytes();
  const FileInfo f = read_info(w.path, w.l, w.id);
  const size_t ids_at = f.data_off, rows_at = ids_at + w.ids.size() * 4;
  // magic, version, header length, header JSON, header checksum, ids, rows, snapshot, last byte
  for (size_t at : {size_t{0}, size_t{9}, size_t{13}, size_t{40}, ids_at - 3, ids_at + 5, rows_at + 100,
                    good.size() / 2, good.size() - 1}) {
    std::vector<char> bad = good;
    bad[at] ^= 0x10;
    w.put(bad);
    model::State st(w.hp, 128);
    st.set_n_past(0);
    try {
      read_all(w, st);
      ADD_FAILURE() << "a flipped bit at byte " << at << " of " << good.size() << " was not noticed";
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(w.path), std::string::npos) << e.what();
      EXPECT_EQ(st.n_past(), 0);
      for (uint32_t il : w.l.mla) EXPECT_TRUE(st.layers[il].kv.empty()) << "byte " << at << ": rows reached the state";
    }
  }
}

TEST(CacheFile, TruncatedOrAppendedIsRefused) {
  Written w("truncate");
  const std::vector<char> good = w.bytes();
  for (size_t n : {size_t{0}, size_t{7}, size_t{20}, good.size() / 3, good.size() - 4, good.size() - 1, good.size() + 1}) {
    std::vector<char> bad = good;
    bad.resize(n, 'x');
    w.put(bad);
    model::State st(w.hp, 128);
    try {
      read_all(w, st);
      ADD_FAILURE() << n << " of " << good.size() << " bytes accepted";
    } catch (const FileError& e) {
      EXPECT_EQ(e.kind, FileError::Corrupt) << e.what();
      EXPECT_EQ(st.n_past(), 0);
    }
  }
}

TEST(CacheFile, ForeignAndMissingFilesAreNamed) {
  Written w("foreign");
  try {
    read_info(w.path, w.l, Identity{0x9999, "model other"});
    ADD_FAILURE() << "a file of another identity was accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(e.kind, FileError::Foreign);
    EXPECT_NE(std::string(e.what()).find("another model or setup (model test; this one: model other)"),
              std::string::npos)
        << e.what();
  }
  std::vector<char> b = w.bytes();
  b[8] = 2;  // a later format version
  w.put(b);
  try {
    read_info(w.path, w.l, w.id);
    ADD_FAILURE();
  } catch (const FileError& e) {
    EXPECT_EQ(e.kind, FileError::Foreign);
    EXPECT_NE(std::string(e.what()).find("format version 2"), std::string::npos) << e.what();
  }
  try {
    read_info(w.path + ".none", w.l, w.id);
    ADD_FAILURE();
  } catch (const FileError& e) {
    EXPECT_EQ(e.kind, FileError::Missing);
  }
}
