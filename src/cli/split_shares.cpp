// k3 split IN OUT_PREFIX --tp N [--pp K]: one file per process of an mpirun job
// (multinode/share_files.h, docs/multinode.md "Per-process files"). Its own file: it needs the
// model's registry, which the sanitizer build of the GGUF commands (tests/gguf) leaves out.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "common/seq_file.h"
#include "convert/digest.h"
#include "convert/progress.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/registry.h"
#include "multinode/share_files.h"

namespace {

using namespace k3;

// One tensor of a process's file: where its bytes are in the source (one range, or one per expert
// of a stack whose rows are cut) and whether it is stored whole.
struct SharedTensor {
  gguf::TensorSpec spec;
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  bool whole = false;
};

// What process `p` holds of src, in registry order: the loader's own cut (bind_weights), so a file
// holds exactly the bytes the process would read of the whole one. The router stays whole (the
// expert store's prefetch reads every row of it), as does a share of nothing (the loader cuts it).
std::vector<SharedTensor> plan_share(const gguf::Model& src, model::HParams hp, const model::Placement& p) {
  const model::Weights w = model::bind_weights(src, hp, p);
  std::vector<SharedTensor> out;
  model::for_each_tensor(hp, [&](const model::TensorRef& r) {
    const model::Tensor& t = model::bound(w, r);
    if (!t) return;
    const gguf::TensorInfo& ti = *t.info;
    SharedTensor x;
    x.spec = {ti.name, ti.type, std::vector<int64_t>(ti.ne, ti.ne + ti.n_dims)};
    const bool cut = !std::equal(t.ne, t.ne + 4, ti.ne);
    if (!cut || r.def.types == model::TypeRule::Router || t.bytes() == 0) {
      x.whole = r.def.cut.kind == model::Cut::Whole || r.def.types == model::TypeRule::Router;
      x.ranges = {{ti.data, ti.nbytes}};
    } else {
      x.spec.ne.assign(t.ne, t.ne + ti.n_dims);
      const size_t mat = static_cast<size_t>(t.ne[1]) * t.row_bytes();
      if (t.ne[2] > 1 && t.mat_stride() != mat)
        for (int64_t e = 0; e < t.ne[2]; ++e) x.ranges.push_back({t.data + e * t.mat_stride(), mat});
      else
        x.ranges = {{t.data, t.bytes()}};
    }
    out.push_back(std::move(x));
  });
  return out;
}

void sync_dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

// Writes the file of process `rank` as PATH.incomplete, reads it back from the disk (every
// tensor's XXH3 against the bytes written, the table and the metadata), then renames it to PATH.
void write_share(const std::string& path, const gguf::Metadata& meta, const std::vector<SharedTensor>& ts,
                 convert::Progress& progress) {
  const std::string staged = path + ".incomplete";
  std::vector<gguf::TensorSpec> specs;
  uint64_t bytes = 0;
  for (const SharedTensor& t : ts) {
    specs.push_back(t.spec);
    for (const auto& r : t.ranges) bytes += r.second;
  }
  std::vector<std::string> hashes;
  const int slot = progress.begin(path, bytes);
  try {
    {
      gguf::Writer w(staged, meta, specs);
      convert::Xxh3 h;
      for (const SharedTensor& t : ts) {
        for (const auto& [data, n] : t.ranges) {
          w.write(data, n);
          h.update(data, n);
          progress.add(slot, n);
        }
        hashes.push_back(h.hex());
      }
      w.finish();
    }
    progress.relabel(slot, path + " verify", bytes);
    const auto f = gguf::File::open(staged);
    SeqReader in(staged);
    if (f->tensors().size() != ts.size() || f->meta().kvs().size() != meta.kvs().size())
      fail("%s: the written file's table differs from the plan", staged.c_str());
    for (size_t i = 0; i < ts.size(); ++i) {
      const gguf::TensorInfo& ti = f->tensors()[i];
      if (ti.name != ts[i].spec.name || std::vector<int64_t>(ti.ne, ti.ne + ti.n_dims) != ts[i].spec.ne ||
          convert::digest_file_range(convert::Digest::Xxh3, in, f->data_offset() + ti.offset, ti.nbytes,
                                     [&](uint64_t n) { progress.tick(slot, n); }) != hashes[i])
        fail("%s: tensor '%s' reads back other than it was written", staged.c_str(), ti.name.c_str());
    }
    if (::rename(staged.c_str(), path.c_str()) != 0)
      fail("%s: cannot rename to %s: %s", staged.c_str(), path.c_str(), std::strerror(errno));
    sync_dir_of(path);
  } catch (...) {
    ::unlink(staged.c_str());
    progress.end(slot, path + " not finished");
    throw;
  }
  progress.end(slot, path + " written and verified");
}

int write_shares(const std::string& in, const std::string& prefix, int tp, int pp, bool json, bool quiet) {
  if (tp < 1 || pp < 1 || tp * pp < 2) fail("--tp %d --pp %d: give at least two processes", tp, pp);
  const gguf::Model src = gguf::Model::open(in);
  if (src.meta().has(model::kShareRank)) fail("%s: already the share of one process (split the whole file)", in.c_str());
  model::HParams hp;
  try {
    hp = model::HParams::from_metadata(src.meta());
  } catch (const Error& e) {
    fail("%s: %s", in.c_str(), e.what());
  }
  const int n = tp * pp;
  if (static_cast<uint32_t>(pp) > hp.n_layer) fail("--pp %d: the model has %u layers", pp, hp.n_layer);
  uint64_t whole = 0;
  for (const gguf::TensorInfo* t : src.tensors()) whole += t->nbytes;
  gguf::Metadata meta = src.meta();
  for (std::string_view k : {gguf::kSplitNo, gguf::kSplitCount, gguf::kSplitTensorsCount}) meta.erase(k);
  meta.set(model::kShareProcesses, gguf::Value::u32(static_cast<uint32_t>(n)));
  meta.set(model::kShareStages, gguf::Value::u32(static_cast<uint32_t>(pp)));
  meta.set(model::kShareModel, gguf::Value::str(multinode::model_fingerprint(src)));
  const size_t slash = in.find_last_of('/');
  meta.set(model::kShareSource, gguf::Value::str(slash == std::string::npos ? in : in.substr(slash + 1)));
  std::vector<std::vector<SharedTensor>> plans;
  uint64_t total = 0;
  for (int r = 0; r < n; ++r) {
    plans.push_back(plan_share(src, hp, model::placement_of(r, n, pp)));
    for (const SharedTensor& t : plans.back())
      for (const auto& range : t.ranges) total += range.second;
  }
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  {
    convert::Progress progress(!quiet && !json);
    progress.set_total(total, n);
    for (int r = 0; r < n; ++r) {
      meta.set(model::kShareRank, gguf::Value::u32(static_cast<uint32_t>(r)));
      const std::string path = multinode::share_path(prefix, r, n);
      write_share(path, meta, plans[r], progress);
      uint64_t bytes = 0, held_whole = 0;
      for (const SharedTensor& t : plans[r])
        for (const auto& range : t.ranges) (t.whole ? held_whole : bytes) += range.second;
      files.push_back({{"path", path}, {"rank", r}, {"tensor_bytes", bytes + held_whole}, {"share_bytes", bytes},
                       {"whole_bytes", held_whole}, {"fraction", static_cast<double>(bytes + held_whole) / whole}});
    }
    progress.stop();
  }
  if (json) {
    std::printf("%s\n", nlohmann::ordered_json({{"source", in}, {"tensor_bytes", whole}, {"tp", tp}, {"pp", pp}, {"files", files}})
                             .dump(2)
                             .c_str());
    return 0;
  }
  for (const auto& f : files)
    std::printf("%s: %s of tensors, %.3f of the whole file's %s (%s its share of the cut tensors, %s held whole)\n",
                f["path"].get<std::string>().c_str(),
                convert::Progress::human_bytes(f["tensor_bytes"].get<double>()).c_str(), f["fraction"].get<double>(),
                convert::Progress::human_bytes(static_cast<double>(whole)).c_str(),
                convert::Progress::human_bytes(f["share_bytes"].get<double>()).c_str(),
                convert::Progress::human_bytes(f["whole_bytes"].get<double>()).c_str());
  std::printf("run: mpirun -np %d k3 COMMAND -m %s%s ...\n", n, prefix.c_str(), pp > 1 ? strprintf(" --pp %d", pp).c_str() : "");
  return 0;
}

struct Register {
  Register() { cli::split_shares = write_shares; }
} registered;

}  // namespace
