// The bad-input acceptance suite: every hostile file makes `k3 info` exit non-zero with exactly
// one line on stderr naming the file and the fault, under a 1 GiB address-space limit, and again
// under AddressSanitizer + UBSan (gguf_check_asan); the reader itself never throws anything but
// k3::Error, whatever bytes it is given.
#include <gtest/gtest.h>

#include <set>

#include "corpus.h"
#include "gguf/gguf.h"
#include "util.h"

namespace {

using namespace gguf_test;
namespace gguf = k3::gguf;

constexpr uint64_t kAddressLimit = uint64_t{1} << 30;

const std::vector<Case>& cases() {
  static const std::vector<Case> c = hostile_cases();
  return c;
}

// Writes a case's files into `dir`; returns the path given to the reader.
std::string materialize(const TempDir& dir, const std::vector<CaseFile>& files) {
  for (const CaseFile& f : files) save(dir / f.name, f.bytes);
  return dir / files[0].name;
}

// Parses bytes in process; true if accepted. Anything thrown but k3::Error fails the test.
bool parses(const std::vector<uint8_t>& b) {
  try {
    gguf::File::from_memory(b.data(), b.size(), "mem.gguf");
    return true;
  } catch (const k3::Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a k3::Error: " << e.what();
    return false;
  }
}

TEST(GgufBadInput, CorpusIsSound) {
  Doc d = base_doc();
  d.build();
  EXPECT_GE(d.data_start - d.infos_end, 2u) << "the padding case needs padding to cut";
  std::set<std::string> ids;
  for (const Case& c : cases()) EXPECT_TRUE(ids.insert(c.id).second) << c.id;
  EXPECT_GE(cases().size(), 30u);
  TempDir dir;
  for (const CaseFile& f : valid_files()) save(dir / f.name, f.bytes);
  for (const CaseFile& f : valid_files()) {
    if (f.name.find("-0000") != std::string::npos && f.name.find("-00001-") == std::string::npos) continue;
    EXPECT_NO_THROW(gguf::Model::open(dir / f.name)) << f.name;
  }
  EXPECT_EQ(gguf::Model::open(dir / "s-00001-of-00003.gguf").tensors().size(), 3u);
}

TEST(GgufBadInput, EveryTruncationFails) {
  Doc d = base_doc();
  std::vector<uint8_t> b = d.build();
  const size_t data_end = d.tensor_start.back() + d.tensors.back().data.size();
  EXPECT_TRUE(parses(b));
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + n);
    EXPECT_FALSE(parses(cut)) << "accepted a file cut to " << n << " bytes";
  }
}

TEST(GgufBadInput, ByteChangesNeverEscape) {
  std::vector<uint8_t> b = base_doc().build();
  for (size_t i = 0; i < b.size(); ++i) {
    for (uint8_t v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::vector<uint8_t> m = b;
      m[i] = v;
      parses(m);
    }
  }
}

class Hostile : public testing::TestWithParam<size_t> {
 protected:
  const Case& c() const { return cases()[GetParam()]; }
  std::string blame(const TempDir& dir) const { return dir / (c().blame.empty() ? c().files[0].name : c().blame); }

  void expect_one_line_error(const std::vector<std::string>& cmd, uint64_t as_limit,
                             const std::vector<std::string>& env = {}) {
    TempDir dir;
    std::string path = materialize(dir, c().files);
    std::vector<std::string> argv = cmd;
    argv.push_back(path);
    RunResult r = run(argv, as_limit, 30, env);
    ASSERT_FALSE(r.timed_out) << "hung";
    ASSERT_EQ(r.signal, 0) << "killed by signal " << r.signal << "\n" << r.err;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not exactly one line:\n" << r.err;
    EXPECT_NE(r.err.find(blame(dir) + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c().expect), std::string::npos) << "expected '" << c().expect << "' in: " << r.err;
  }
};

TEST_P(Hostile, InProcess) {
  TempDir dir;
  std::string path = materialize(dir, c().files);
  expect_error([&] { gguf::Model::open(path); }, {blame(dir) + ": ", c().expect});
}

TEST_P(Hostile, K3InfoUnderMemoryLimit) { expect_one_line_error({bin_path("k3"), "info"}, kAddressLimit); }

TEST_P(Hostile, SanitizedInfo) {
  expect_one_line_error({bin_path("gguf_check_asan"), "info"}, 0,
                        {"ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86",
                         "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=87"});
}

INSTANTIATE_TEST_SUITE_P(Corpus, Hostile, testing::Range(size_t{0}, cases().size()),
                         [](const testing::TestParamInfo<size_t>& i) { return cases()[i.param].id; });

TEST(GgufBadInput, ValidFilesPassEveryDriver) {
  TempDir dir;
  for (const CaseFile& f : valid_files()) save(dir / f.name, f.bytes);
  for (const char* name : {"base.gguf", "empty.gguf", "align64.gguf", "s-00001-of-00003.gguf", "lowbit.gguf"}) {
    for (const std::string& exe : {bin_path("k3"), bin_path("gguf_check_asan")}) {
      RunResult r = run({exe, "info", dir / name}, exe.ends_with("k3") ? kAddressLimit : 0);
      EXPECT_EQ(r.exit_code, 0) << exe << " " << name << "\n" << r.err;
      EXPECT_EQ(r.err, "");
      EXPECT_NE(r.out.find("tensors ("), std::string::npos);
    }
  }
}

}  // namespace
