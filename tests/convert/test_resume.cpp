// Interrupted conversions: kill -9 at exact points (K3_CONVERT_CRASH) and at random times, then a
// rerun gives output files and manifest byte-identical to an uninterrupted run. A corrupted or
// truncated part is found by verify and redone by a rerun; subsets (--shards) and --jobs give the
// same files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "common/error.h"
#include "convert/manifest.h"
#include "gguf/gguf.h"
#include "helpers.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {

using Snapshot = std::map<std::string, std::string>;

Snapshot snapshot(const std::string& dir) {
  Snapshot s;
  for (const auto& n : test::list_dir(dir)) s[n] = test::read_file(dir + "/" + n);
  return s;
}

std::string diff(const Snapshot& a, const Snapshot& b) {
  for (const auto& [n, c] : a) {
    auto it = b.find(n);
    if (it == b.end()) return "missing " + n;
    if (it->second != c) return "different " + n;
  }
  for (const auto& [n, c] : b)
    if (!a.count(n)) return "extra " + n;
  return "";
}

// Runs the conversion in a child process; returns the child's wait status.
int run_child(const convert::ConvertOptions& opt, const char* crash, int kill_after_us = -1) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    if (crash) setenv("K3_CONVERT_CRASH", crash, 1);
    try {
      convert::run_convert(opt);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  if (kill_after_us >= 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(kill_after_us));
    kill(pid, SIGKILL);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

class ConvertResume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    auto o = test::tiny_options(GgmlType::BF16, GgmlType::MXFP4);
    o.n_embd = 256, o.n_expert = 16, o.n_ff_exp = 128, o.latent = 128, o.n_ff = 512;
    ckpt_ = new test::Checkpoint(test::make_checkpoint(dir_->path(), o));
    const auto t0 = std::chrono::steady_clock::now();
    convert::run_convert(test::convert_options(ckpt_->hf, *dir_ / "ref", 2));
    ref_us_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    ref_ = new Snapshot(snapshot(*dir_ / "ref"));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete ckpt_;
    delete dir_;
  }
  static convert::ConvertOptions opts(const std::string& out, int jobs = 2) {
    return test::convert_options(ckpt_->hf, out, jobs);
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline test::Checkpoint* ckpt_ = nullptr;
  static inline Snapshot* ref_ = nullptr;
  static inline long ref_us_ = 0;
};

}  // namespace

TEST_F(ConvertResume, ReferenceIsComplete) {
  ASSERT_EQ(ref_->count("MANIFEST.json"), 1u);
  size_t parts = 0;
  for (const auto& [n, c] : *ref_) {
    parts += n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0;
    EXPECT_EQ(n.find(".incomplete"), std::string::npos) << n;
    EXPECT_EQ(n.find(".lock"), std::string::npos) << n;
  }
  EXPECT_EQ(parts + 1, ref_->size());
  EXPECT_GT(parts, 5u);
}

TEST_F(ConvertResume, KillAtExactPoints) {
  for (const char* point : {"tensor:1", "tensor:40", "tensor:150", "written:1", "written:4", "renamed:1", "renamed:6"}) {
    SCOPED_TRACE(point);
    test::TempDir d;
    const std::string out = d / "out";
    int st = run_child(opts(out), point);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
    // Nothing unfinished is under a final name.
    convert::ConvertResult r = convert::run_convert(opts(out));
    EXPECT_EQ(diff(*ref_, snapshot(out)), "");
    EXPECT_GT(r.parts_written, 0);
  }
}

TEST_F(ConvertResume, KillAtRandomTimes) {
  std::mt19937 rng(12345);
  test::TempDir d;
  const std::string out = d / "out";
  const long span = std::max<long>(ref_us_ * 3 / 2, 2000);
  int killed = 0;
  for (int i = 0; i < 8; ++i) {
    int st = run_child(opts(out, 1 + i % 2), nullptr, static_cast<int>(rng() % span));
    killed += WIFSIGNALED(st);
    ASSERT_TRUE(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) << "status " << st;
  }
  convert::run_convert(opts(out));
  EXPECT_EQ(diff(*ref_, snapshot(out)), "");
  RecordProperty("killed", killed);
}

// Reading every part back before the rename (--verify-writes) changes nothing in the output, and
// a run killed during it resumes like any other.
TEST_F(ConvertResume, VerifyWritesGivesTheSameFiles) {
  test::TempDir d;
  const std::string out = d / "out";
  auto o = opts(out);
  o.verify_writes = true;
  int st = run_child(o, "written:3");
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
  convert::ConvertResult r = convert::run_convert(o);
  EXPECT_GT(r.parts_written, 0);
  EXPECT_EQ(diff(*ref_, snapshot(out)), "");
}

TEST_F(ConvertResume, CorruptedPartIsDetectedAndRedone) {
  test::TempDir d;
  const std::string out = d / "out";
  fs::create_directories(out);
  for (const auto& [n, c] : *ref_) std::ofstream(out + "/" + n, std::ios::binary) << c;
  // Flip one byte in the data of part 3 and truncate part 5.
  std::string p3, p5;
  for (const auto& [n, c] : *ref_) {
    if (n.find("-00003-of-") != std::string::npos) p3 = out + "/" + n;
    if (n.find("-00005-of-") != std::string::npos) p5 = out + "/" + n;
  }
  auto f3 = gguf::File::open(p3);
  const gguf::TensorInfo& victim = f3->tensors().back();
  const uint64_t off = f3->data_offset() + victim.offset + victim.nbytes / 2;
  const std::string victim_name = victim.name;
  f3.reset();
  {
    std::fstream f(p3, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(off);
    char c;
    f.get(c);
    f.seekp(off);
    f.put(static_cast<char>(c ^ 0x40));
  }
  fs::resize_file(p5, fs::file_size(p5) - 100);

  convert::Manifest m = convert::Manifest::load(out + "/MANIFEST.json");
  auto rep = convert::verify_files(m, {p3}, 1);
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_NE(rep.problems[0].find(victim_name), std::string::npos) << rep.problems[0];
  EXPECT_NE(rep.problems[0].find("SHA-256"), std::string::npos) << rep.problems[0];
  auto rep5 = convert::verify_files(m, {p5}, 1);
  EXPECT_FALSE(rep5.ok());

  convert::ConvertResult r = convert::run_convert(opts(out));
  EXPECT_EQ(r.parts_written, 2);
  EXPECT_EQ(r.parts_skipped, r.parts_total - 2);
  EXPECT_EQ(diff(*ref_, snapshot(out)), "");
}

TEST_F(ConvertResume, LostManifestRedoesEverything) {
  test::TempDir d;
  const std::string out = d / "out";
  fs::create_directories(out);
  for (const auto& [n, c] : *ref_)
    if (n != "MANIFEST.json") std::ofstream(out + "/" + n, std::ios::binary) << c;
  convert::ConvertResult r = convert::run_convert(opts(out));
  EXPECT_EQ(r.parts_written, r.parts_total);
  EXPECT_EQ(diff(*ref_, snapshot(out)), "");
}

TEST_F(ConvertResume, SubsetsThenRestAndJobsAgree) {
  test::TempDir d;
  const std::string out = d / "out";
  auto o = opts(out, 1);
  o.shards = "2,4-5";
  convert::ConvertResult r1 = convert::run_convert(o);
  EXPECT_EQ(r1.parts_written, 3);
  size_t ggufs = 0;
  for (const auto& n : test::list_dir(out)) ggufs += n.find(".gguf") != std::string::npos;
  EXPECT_EQ(ggufs, 3u);
  convert::ConvertResult r2 = convert::run_convert(opts(out, 1));
  EXPECT_EQ(r2.parts_skipped, 3);
  EXPECT_EQ(diff(*ref_, snapshot(out)), "");
  auto bad = opts(out);
  bad.shards = "0";
  EXPECT_THROW(convert::run_convert(bad), Error);
  bad.shards = "3-1";
  EXPECT_THROW(convert::run_convert(bad), Error);
}

TEST_F(ConvertResume, ScratchDirectory) {
  test::TempDir d;
  auto o = opts(d / "out");
  o.scratch = d / "scratch";
  convert::run_convert(o);
  EXPECT_EQ(diff(*ref_, snapshot(d / "out")), "");
  EXPECT_TRUE(test::list_dir(d / "scratch").empty());
}

TEST_F(ConvertResume, ScratchOnAnotherFileSystem) {
  // /dev/shm is tmpfs: finished parts are copied into the output directory, then verified there.
  ASSERT_TRUE(fs::is_directory("/dev/shm")) << "no /dev/shm";
  test::TempDir d;
  const std::string scratch = "/dev/shm/k3-convert-test-scratch-" + std::to_string(getpid());
  auto o = opts(d / "out");
  o.scratch = scratch;
  convert::run_convert(o);
  EXPECT_EQ(diff(*ref_, snapshot(d / "out")), "");
  EXPECT_TRUE(test::list_dir(scratch).empty());
  fs::remove_all(scratch);
}

TEST_F(ConvertResume, OneConversionPerDirectory) {
  test::TempDir d;
  const std::string out = d / "out";
  fs::create_directories(out);
  int fd = ::open((out + "/.k3-convert.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  try {
    convert::run_convert(opts(out));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another k3 convert"), std::string::npos) << e.what();
  }
  ::close(fd);
  convert::run_convert(opts(out));
  EXPECT_EQ(diff(*ref_, snapshot(out)), "");
}
