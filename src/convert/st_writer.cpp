#include "convert/st_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace k3::st {

uint64_t Spec::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string header_json(const std::vector<Spec>& specs) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const Spec& s : specs) {
    h[s.name] = {{"dtype", dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {off, off + s.nbytes()}}};
    off += s.nbytes();
  }
  std::string j = h.dump();
  while (j.size() % 8) j += ' ';
  return j;
}

Writer::Writer(std::string path, std::vector<Spec> specs) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  const std::string h = header_json(specs);
  for (const Spec& s : specs) expect_ += s.nbytes();
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail("%s: cannot create: %s", tmp_.c_str(), std::strerror(errno));
  const uint64_t n = h.size();
  if (std::fwrite(&n, 8, 1, f_) != 1 || std::fwrite(h.data(), 1, h.size(), f_) != h.size())
    fail("%s: write failed: %s", tmp_.c_str(), std::strerror(errno));
}

Writer::~Writer() {
  if (f_) std::fclose(f_);
  if (!done_) ::unlink(tmp_.c_str());
}

void Writer::write(const void* data, size_t n) {
  if (written_ + n > expect_) fail("%s: more data than the header describes", tmp_.c_str());
  if (n && std::fwrite(data, 1, n, f_) != n) fail("%s: write failed: %s", tmp_.c_str(), std::strerror(errno));
  written_ += n;
}

void Writer::finish() {
  if (written_ != expect_) fail("%s: %llu of %llu data bytes written", tmp_.c_str(), (unsigned long long)written_, (unsigned long long)expect_);
  if (std::fflush(f_) != 0 || ::fsync(fileno(f_)) != 0 || std::fclose(f_) != 0) {
    f_ = nullptr;
    fail("%s: cannot write: %s", tmp_.c_str(), std::strerror(errno));
  }
  f_ = nullptr;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("%s: cannot rename: %s", tmp_.c_str(), std::strerror(errno));
  done_ = true;
}

}  // namespace k3::st
