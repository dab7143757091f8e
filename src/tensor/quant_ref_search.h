// The scale searches of the reference K-quant quantizers (quant-formats.md §6.1), defined in
// quant_ref_search.cpp (compiled without fused multiply-adds). Declared apart from quant_ref_impl.h so
// that the SIMD quantizers (quantize/fast_kquants_impl.h) can call the scalar ones they share
// without taking that header's fp-contract pragma.
#pragma once
#include <cstdint>

namespace k3::ref::detail {

// Search routines of §6.1. make_qkx2_quants also serves as ggml's make_qkx3_quants: with
// weights passed (all callers do) the two differ only in an equivalent `max == min` test.
// Returns the scale; *min_out = -min >= 0 is subtracted on decode; L in [0, nmax].
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin,
                       float rdelta, int nstep, bool use_mad);
// do_rmse = true variant (the only one used): L in [0, 2*nmax), stored + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);
// rmse_type = 1 (the only one used): weights qw, or x*x when null; L stored + nmax.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw);
// Non-negative values (sub-block scales or mins) to L in [0, nmax] under weights qw.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* qw);

}  // namespace k3::ref::detail
