// Internal: how the per-ISA source files fill the kernel table (kernels.cpp owns the tables).
// The SIMD files hold only file-local functions plus their register_* entry point, and must not
// call inline functions from shared headers: an inline function compiled there with AVX flags
// could be the copy the linker keeps for baseline callers.
#pragma once
#include "tensor/kernels.h"

namespace k3::detail {

constexpr int kTypeSlots = 64;  // indexed by ggml type id
using KernelTable = QuantKernels[kTypeSlots];

// Each fills the entries it implements; the table arrives holding the next lower ISA's kernels.
void register_scalar_kernels(KernelTable& t);  // dot_ref.cpp
void register_avx2_kernels(KernelTable& t);    // kernels_avx2.cpp
void register_avxvnni_kernels(KernelTable& t); // kernels_avxvnni.cpp
void register_avx512_kernels(KernelTable& t);  // kernels_avx512.cpp

}  // namespace k3::detail
