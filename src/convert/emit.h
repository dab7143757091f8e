// Produces the bytes of one output tensor from its checkpoint sources, in order and in bounded
// chunks (a few MiB), whatever the tensor's size: the converter never holds a shard or a whole
// expert stack. Source pages are released from the process as they are consumed.
#pragma once
#include <cstddef>
#include <cstdint>

#include "convert/plan.h"

namespace k3::convert {

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void put(const void* data, size_t n) = 0;
};

void emit_tensor(const Plan& plan, const OutTensor& t, Sink& out);

// Element conversions (exact where the target can hold the value; else round to nearest even).
void dtype_to_f32(st::DType src, const uint8_t* in, float* out, size_t n);
void f32_to_type(GgmlType dst, const float* in, uint8_t* out, size_t n);
// Whether a source dtype is bit-identical to a ggml type (so bytes are copied, never converted).
bool same_repr(st::DType src, GgmlType dst);

}  // namespace k3::convert
