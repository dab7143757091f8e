// Hand-run input generator for the converter throughput benchmark (docs/benchmarks.md): writes a
// large K3-structured GGUF quickly (random BF16 matrices, random MXFP4 expert blocks, sane F32
// vectors; make-tiny's Gaussian init would take too long at this size), then the Hugging Face
// checkpoint of the same weights with write_hf_checkpoint. Also evicts files from the page cache
// so the conversion reads from disk.
//
//   convert_bench_gen gen DIR [--layers N] [--experts N]   -> DIR/bench.gguf, DIR/hf/
//   convert_bench_gen evict PATH...                         (posix_fadvise DONTNEED)
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "convert/hf_writer.h"
#include "gguf/writer.h"
#include "model/registry.h"
#include "model/synth_vocab.h"
#include "model/synthetic.h"
#include "tensor/fp16.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
};

void evict(const std::string& p) {
  if (fs::is_directory(p)) {
    for (const auto& e : fs::recursive_directory_iterator(p))
      if (e.is_regular_file()) evict(e.path().string());
    return;
  }
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

int gen(const std::string& dir, uint32_t layers, uint32_t experts) {
  model::SynthOptions o = model::synth_preset("medium");
  o.n_layer = layers;
  o.n_expert = experts;
  o.type = GgmlType::BF16;
  o.expert_type = GgmlType::MXFP4;
  const model::HParams hp = model::synth_hparams(o);
  gguf::Metadata meta;
  hp.to_metadata(meta);
  meta.set("general.name", gguf::Value::str("k3-convert-bench"));
  tok::write_vocab(model::synth_vocab(o.n_vocab), meta);
  std::vector<gguf::TensorSpec> specs;
  std::vector<bool> keep_f32;
  model::for_each_tensor(hp, [&](const model::TensorRef& r) {
    const bool f32 = r.def.types == model::TypeRule::KeepF32 || r.def.types == model::TypeRule::Router;
    const GgmlType t = f32 ? GgmlType::F32 : r.def.types == model::TypeRule::Experts ? GgmlType::MXFP4 : GgmlType::BF16;
    specs.push_back({r.name, t, std::vector<int64_t>(r.shape.ne, r.shape.ne + r.shape.n_dims)});
    keep_f32.push_back(f32);
  });
  fs::create_directories(dir);
  const std::string path = dir + "/bench.gguf";
  {
    gguf::Writer w(path, meta, specs);
    Rng rng{0x9E3779B97F4A7C15ull};
    std::vector<uint8_t> buf(8u << 20);
    uint64_t total = 0;
    for (const auto& s : specs) {
      uint64_t n = row_size(s.type, s.ne[0]);
      for (size_t d = 1; d < s.ne.size(); ++d) n *= s.ne[d];
      total += n;
      if (s.type == GgmlType::F32) {
        std::vector<float> v(n / 4);
        const bool alog = s.name.size() > 6 && s.name.compare(s.name.size() - 6, 6, ".ssm_a") == 0;
        for (auto& x : v) {
          const float u = static_cast<float>(rng.next() >> 40) / static_cast<float>(1 << 24);
          x = alog ? -std::exp(u) : 0.5f + u;
        }
        w.write(v.data(), n);
        continue;
      }
      for (uint64_t off = 0; off < n; off += buf.size()) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - off));
        if (s.type == GgmlType::BF16) {
          for (size_t i = 0; i + 8 <= m; i += 8) {  // finite values in [2^-8, 2)
            uint64_t r = rng.next() & 0x807F807F807F807Full;
            r |= 0x3B003B003B003B00ull + ((rng.next() & 0x0300030003000300ull));
            std::memcpy(&buf[i], &r, 8);
          }
        } else {  // MXFP4 blocks: scale byte near 2^-7, random nibbles
          for (size_t i = 0; i + 8 <= m; i += 8) {
            uint64_t r = rng.next();
            std::memcpy(&buf[i], &r, 8);
          }
          for (size_t b = (17 - off % 17) % 17; b < m; b += 17) buf[b] = static_cast<uint8_t>(118 + (buf[b] & 7));
        }
        w.write(buf.data(), m);
      }
    }
    w.finish();
    std::fprintf(stderr, "bench_gen: %s: %zu tensors, %.2f GB of tensor data\n", path.c_str(), specs.size(), total / 1e9);
  }
  convert::write_hf_checkpoint(path, dir + "/hf");
  std::fprintf(stderr, "bench_gen: wrote %s/hf\n", dir.c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 3 && !std::strcmp(argv[1], "gen")) {
      uint32_t layers = 24, experts = 256;
      for (int i = 3; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--experts")) experts = std::atoi(argv[i + 1]);
      }
      return gen(argv[2], layers, experts);
    }
    if (argc >= 3 && !std::strcmp(argv[1], "evict")) {
      for (int i = 2; i < argc; ++i) evict(argv[i]);
      return 0;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gen: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: convert_bench_gen gen DIR [--layers N] [--experts N] | evict PATH...\n");
  return 2;
}
