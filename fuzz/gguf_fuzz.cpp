// libFuzzer target: the GGUF reader on arbitrary bytes must either accept them or throw
// k3::Error; an accepted file must survive a rewrite and parse again to the same content.
#include <unistd.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace gguf = k3::gguf;

static void check(const gguf::File& f) {
  const gguf::Metadata& m = f.meta();
  for (const gguf::KV& kv : m.kvs()) {
    (void)kv.value.to_string();
    try {
      (void)m.get_u32_per_layer(kv.key, 4);
    } catch (const k3::Error&) {
    }
  }
  uint8_t sum = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    (void)t.shape_string();
    if (t.nbytes) sum ^= t.data[0] ^ t.data[t.nbytes - 1];
  }
  (void)sum;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<gguf::File> f;
  try {
    f = gguf::File::from_memory(data, size, "fuzz.gguf");
  } catch (const k3::Error&) {
    return 0;
  }
  check(*f);
  static const std::string out = "/tmp/k3_gguf_fuzz_" + std::to_string(getpid()) + ".gguf";
  gguf::rewrite(*f, out);
  auto again = gguf::File::open(out);
  if (again->meta().kvs().size() != f->meta().kvs().size() || again->tensors().size() != f->tensors().size())
    __builtin_trap();
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const auto &a = f->tensors()[i], &b = again->tensors()[i];
    if (a.name != b.name || a.nbytes != b.nbytes || a.offset != b.offset) __builtin_trap();
  }
  unlink(out.c_str());
  return 0;
}
