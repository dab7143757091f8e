// The disk tier through the whole cache, on a tiny model: what one cache wrote serves a new one
// (a restart) bit-exactly; corrupt, truncated, foreign and half-written files are skipped with a
// warning and never loaded; a full disk (the free-space hook, and a real file-size limit that
// makes the kernel refuse the bytes) degrades to RAM with a warning; the disk budget holds; two
// caches writing to one directory at once leave only good files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "driver.h"
#include "helpers.h"

using namespace k3;
using namespace k3::test;
namespace fs = std::filesystem;

namespace {

struct Env {
  std::unique_ptr<model::Model> m = model::Model::load(make_model(config_a(1e-5f), "cache_disk_a"));
  ThreadPool pool{1};
  std::mutex mu;
  std::vector<std::string> warnings;

  std::unique_ptr<cache::PrefixCache> make(const std::string& dir, int64_t ram_snapshots, int64_t disk = int64_t{1} << 40,
                                           const std::string& tmpl = "template") {
    const cache::Layout l = cache::Layout::of(m->hparams());
    cache::Options o = ram_options(ram_snapshots * static_cast<int64_t>(l.snapshot_floats() * 4), dir);
    o.disk_bytes = disk;
    o.log = [this](cache::Level lv, const std::string& s) {
      if (lv != cache::Level::Warn) return;
      std::lock_guard<std::mutex> lk(mu);
      warnings.push_back(s);
    };
    return std::make_unique<cache::PrefixCache>(*m, tmpl, "test", o);
  }
  std::vector<int32_t> prompt(int n, uint64_t seed) { return prompt_ids(n, m->n_vocab(), seed); }
  // Runs prompt through c and checks it against the plain path; returns the tokens restored.
  int64_t check(cache::PrefixCache& c, const std::vector<int32_t>& p, int64_t n_batch = 5) {
    const Outcome got = run_cached(*m, c, p, {}, n_batch, 3, pool);
    const Outcome want = run_plain(*m, p, 3, pool);
    EXPECT_EQ(got.tokens, want.tokens);
    for (size_t g = 0; g < want.logits.size(); ++g)
      EXPECT_EQ(0, std::memcmp(got.logits[g].data(), want.logits[g].data(), want.logits[g].size() * 4));
    EXPECT_TRUE(same_bits(*got.state, *want.state));
    return got.cached;
  }
  bool warned(const std::string& what) {
    std::lock_guard<std::mutex> lk(mu);
    for (const auto& w : warnings)
      if (w.find(what) != std::string::npos) return true;
    return false;
  }
};

std::vector<fs::path> entries(const std::string& dir) {
  std::vector<fs::path> r;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".k3pc") r.push_back(e.path());
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

TEST(Disk, ARestartIsServedFromDisk) {
  Env env;
  const std::string dir = fresh_dir("disk_restart");
  const auto p = env.prompt(30, 1);
  std::vector<int32_t> longer = p;
  longer.insert(longer.end(), {5, 6, 7, 8});
  {
    auto c = env.make(dir, 100);
    EXPECT_EQ(env.check(*c, p), 0);
  }  // the destructor finishes the writes
  ASSERT_EQ(entries(dir).size(), 1u) << "the prompt end went to disk";
  auto c = env.make(dir, 100);
  EXPECT_EQ(env.check(*c, longer), 30) << "a new cache restores the first one's prompt end";
  EXPECT_EQ(c->stats().disk.loads, 1);
  EXPECT_TRUE(env.warnings.empty());
}

TEST(Disk, BadFilesAreSkippedWithAWarning) {
  Env env;
  const std::string dir = fresh_dir("disk_bad");
  const auto a = env.prompt(30, 2), b = env.prompt(31, 3), d = env.prompt(32, 4), e = env.prompt(33, 5);
  std::string mine;
  {
    auto c = env.make(dir, 100);
    mine = strprintf("%016llx-", static_cast<unsigned long long>(c->identity().hash));
    for (const auto& p : {a, b, d, e}) env.check(*c, p);
  }
  {
    auto other = env.make(dir, 100, int64_t{1} << 40, "another template");  // a foreign entry
    env.check(*other, env.prompt(20, 9));
  }
  std::vector<fs::path> ours;
  fs::path foreign;
  for (const auto& f : entries(dir)) (f.filename().string().rfind(mine, 0) == 0 ? ours.push_back(f) : void(foreign = f));
  ASSERT_EQ(ours.size(), 4u);
  ASSERT_FALSE(foreign.empty());
  auto bytes = [](const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  auto put = [](const fs::path& f, const std::vector<char>& v) {
    std::ofstream(f, std::ios::binary | std::ios::trunc).write(v.data(), static_cast<std::streamsize>(v.size()));
  };
  std::vector<char> v = bytes(ours[0]);
  v.resize(v.size() - 100);
  put(ours[0], v);  // truncated
  v = bytes(ours[1]);
  v[v.size() - 20] ^= 1;
  put(ours[1], v);  // a flipped bit in its snapshot: found only when loaded
  v = bytes(ours[2]);
  v[30] ^= 1;
  put(ours[2], v);  // a flipped bit in its header
  fs::copy_file(foreign, fs::path(dir) / (mine + "00000000deadbeef.k3pc"));  // foreign, under our name
  put(fs::path(dir) / (mine + "0000000000000bad.k3pc"), std::vector<char>(5000, 'z'));  // not a cache file

  env.warnings.clear();
  auto c = env.make(dir, 100);
  EXPECT_TRUE(env.warned("truncated")) << "truncated";
  EXPECT_TRUE(env.warned("header checksum mismatch"));
  EXPECT_TRUE(env.warned("made for another model or setup"));
  EXPECT_TRUE(env.warned("wrong magic"));
  EXPECT_TRUE(env.warned("skipping 1 file(s) of other models or setups"));
  EXPECT_EQ(c->stats().disk.skipped, 4);
  // Every prompt still gets the plain result; the good entry and only it is restored.
  int64_t restored = 0;
  for (const auto& p : {a, b, d, e}) restored += env.check(*c, p) > 0;
  EXPECT_TRUE(env.warned("checksum mismatch in the data")) << "the flipped snapshot bit found at load";
  EXPECT_EQ(restored, 1);
  EXPECT_EQ(c->stats().disk.loads, 1);
}

TEST(Disk, HalfWrittenFilesOfDeadProcessesAreRemoved) {
  Env env;
  const std::string dir = fresh_dir("disk_tmp");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // its pid is now free: a writer killed mid-write
  const fs::path dead = fs::path(dir) / (".k3pc-tmp-" + std::to_string(child) + "-1");
  const fs::path live = fs::path(dir) / (".k3pc-tmp-" + std::to_string(getpid()) + "-77");
  std::ofstream(dead) << "half";
  std::ofstream(live) << "being written";
  auto c = env.make(dir, 100);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live)) << "a live writer's file is left alone";
  EXPECT_EQ(c->stats().disk.files, 0);
}

TEST(Disk, AFullDiskDegradesToRam) {
  Env env;
  const std::string dir = fresh_dir("disk_full");
  ::setenv("K3_CACHE_FREE_BYTES", "1000", 1);
  {
    auto c = env.make(dir, 100);
    const auto p = env.prompt(30, 6);
    env.check(*c, p);
    c->flush();
    EXPECT_EQ(env.check(*c, p), 30) << "RAM still serves";
    EXPECT_GT(c->stats().disk.no_space, 0);
  }
  ::unsetenv("K3_CACHE_FREE_BYTES");
  EXPECT_TRUE(env.warned("the disk is full")) << (env.warnings.empty() ? "" : env.warnings[0]);
  EXPECT_TRUE(entries(dir).empty());
}

TEST(Disk, AFileSizeLimitDegradesToRam) {
  Env env;
  const std::string dir = fresh_dir("disk_fsize");
  const auto p = env.prompt(30, 7);
  auto c = env.make(dir, 100);
  struct rlimit old {};
  getrlimit(RLIMIT_FSIZE, &old);
  auto* prev = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 20000;  // the kernel refuses bytes past 20 kB with EFBIG
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  env.check(*c, p);
  c->flush();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  EXPECT_TRUE(env.warned("File too large")) << (env.warnings.empty() ? "no warning" : env.warnings[0]);
  EXPECT_EQ(env.check(*c, p), 30);
  EXPECT_TRUE(entries(dir).empty());
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(Disk, TheBudgetHolds) {
  Env env;
  const std::string dir = fresh_dir("disk_budget");
  const int64_t entry = static_cast<int64_t>(fs::file_size([&] {
    auto c = env.make(fresh_dir("disk_budget_probe"), 100);
    env.check(*c, env.prompt(30, 50));
    c->flush();
    return entries(temp_path("disk_budget_probe"))[0];
  }()));
  auto c = env.make(dir, 100, 3 * entry + entry / 2);
  for (int i = 0; i < 8; ++i) env.check(*c, env.prompt(30, 60 + i));
  c->flush();
  int64_t total = 0;
  for (const auto& f : entries(dir)) total += static_cast<int64_t>(fs::file_size(f));
  EXPECT_LE(total, 3 * entry + entry / 2);
  EXPECT_EQ(entries(dir).size(), 3u);
  EXPECT_EQ(c->stats().disk.removed, 5);
}

TEST(Disk, TwoCachesOnOneDirectory) {
  Env env;
  const std::string dir = fresh_dir("disk_two");
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) prompts.push_back(env.prompt(20 + i, 100 + i % 5));  // overlapping pairs
  {
    auto a = env.make(dir, 1), b = env.make(dir, 1);  // one snapshot of RAM: everything else goes to disk
    auto work = [&](cache::PrefixCache& c, int from) {
      ThreadPool pool(1);
      for (int r = 0; r < 10; ++r) {
        const auto& p = prompts[(from + r) % prompts.size()];
        const Outcome got = run_cached(*env.m, c, p, {0, 7, 13}, 4, 2, pool);
        EXPECT_EQ(got.tokens, run_plain(*env.m, p, 2, pool).tokens);
      }
    };
    std::thread ta([&] { work(*a, 0); }), tb([&] { work(*b, 3); });
    ta.join(), tb.join();
  }
  env.warnings.clear();
  auto c = env.make(dir, 100);
  EXPECT_TRUE(env.warnings.empty()) << env.warnings[0];
  EXPECT_GT(c->stats().disk.files, 3);
  int64_t restored = 0;
  for (const auto& p : prompts) restored += env.check(*c, p) > 0;
  EXPECT_GT(restored, 0);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().extension(), ".k3pc") << "left behind: " << e.path();
}
