// Dispatch of the reference quantizers by type, and the float row conversions (quant-formats.md §3).
#include "tensor/quant_ref.h"

#include <cstring>

#include "common/error.h"
#include "tensor/fp16.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

void dequantize_row_f16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}
void dequantize_row_bf16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}
void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

namespace {
template <typename Block>
const Block* as(const void* p) { return static_cast<const Block*>(p); }
template <typename Block>
Block* as(void* p) { return static_cast<Block*>(p); }

void check_row(GgmlType t, int64_t n) {
  const int64_t block = type_info(t).block;
  if (n < 0 || n % block != 0)
    fail("%s: row of %lld elements is not a multiple of the block size %lld", type_name(t), static_cast<long long>(n),
         static_cast<long long>(block));
}
}  // namespace

void dequantize_row(GgmlType t, const void* x, float* y, int64_t n) {
  check_row(t, n);
  switch (t) {
    case GgmlType::F32: std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::F16: return dequantize_row_f16(as<uint16_t>(x), y, n);
    case GgmlType::BF16: return dequantize_row_bf16(as<uint16_t>(x), y, n);
    case GgmlType::Q4_0: return dequantize_row_q4_0(as<block_q4_0>(x), y, n);
    case GgmlType::Q4_1: return dequantize_row_q4_1(as<block_q4_1>(x), y, n);
    case GgmlType::Q5_0: return dequantize_row_q5_0(as<block_q5_0>(x), y, n);
    case GgmlType::Q5_1: return dequantize_row_q5_1(as<block_q5_1>(x), y, n);
    case GgmlType::Q8_0: return dequantize_row_q8_0(as<block_q8_0>(x), y, n);
    case GgmlType::Q8_0_X8: return dequantize_row_q8_0_x8(as<block_q8_0x8>(x), y, n);
    case GgmlType::Q8_1: return dequantize_row_q8_1(as<block_q8_1>(x), y, n);
    case GgmlType::Q2_K:
    case GgmlType::Q2_K_SB: return dequantize_row_q2_K(as<block_q2_K>(x), y, n);
    case GgmlType::Q3_K: return dequantize_row_q3_K(as<block_q3_K>(x), y, n);
    case GgmlType::Q4_K: return dequantize_row_q4_K(as<block_q4_K>(x), y, n);
    case GgmlType::Q4_K_LANES: return dequantize_row_q4_K_lanes(as<block_q4_Kl>(x), y, n);
    case GgmlType::Q5_K: return dequantize_row_q5_K(as<block_q5_K>(x), y, n);
    case GgmlType::Q6_K: return dequantize_row_q6_K(as<block_q6_K>(x), y, n);
    case GgmlType::Q8_K: return dequantize_row_q8_K(as<block_q8_K>(x), y, n);
    case GgmlType::MXFP4: return dequantize_row_mxfp4(as<block_mxfp4>(x), y, n);
    case GgmlType::MXFP4_LANES: return dequantize_row_mxfp4_lanes(as<block_mxfp4x8>(x), y, n);
    case GgmlType::IQ4_NL: return dequantize_row_iq4_nl(as<block_iq4_nl>(x), y, n);
    case GgmlType::IQ4_XS: return dequantize_row_iq4_xs(as<block_iq4_xs>(x), y, n);
    case GgmlType::IQ2_XXS: return dequantize_row_iq2_xxs(as<block_iq2_xxs>(x), y, n);
    case GgmlType::IQ2_XS: return dequantize_row_iq2_xs(as<block_iq2_xs>(x), y, n);
    case GgmlType::IQ2_S: return dequantize_row_iq2_s(as<block_iq2_s>(x), y, n);
    case GgmlType::IQ1_S: return dequantize_row_iq1_s(as<block_iq1_s>(x), y, n);
    case GgmlType::IQ1_M: return dequantize_row_iq1_m(as<block_iq1_m>(x), y, n);
    case GgmlType::Q1_0: return dequantize_row_q1_0(as<block_q1_0>(x), y, n);
    case GgmlType::Q2_0: return dequantize_row_q2_0(as<block_q2_0>(x), y, n);
    case GgmlType::TQ1_0: return dequantize_row_tq1_0(as<block_tq1_0>(x), y, n);
    case GgmlType::TQ2_0: return dequantize_row_tq2_0(as<block_tq2_0>(x), y, n);
    case GgmlType::NVFP4: return dequantize_row_nvfp4(as<block_nvfp4>(x), y, n);
    case GgmlType::IQ3_XXS: return dequantize_row_iq3_xxs(as<block_iq3_xxs>(x), y, n);
    case GgmlType::IQ3_S: return dequantize_row_iq3_s(as<block_iq3_s>(x), y, n);
    default: fail("dequantize: type %s is not supported", type_name(t));
  }
}

bool can_quantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::MXFP4: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M:
    case GgmlType::Q1_0: case GgmlType::Q2_0: case GgmlType::TQ1_0: case GgmlType::TQ2_0: case GgmlType::NVFP4:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S:
      return true;
    default:
      return false;
  }
}

bool requires_imatrix(GgmlType t) { return t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ1_S; }

void detail::require_imatrix(GgmlType t, const float* qw) {
  if (!qw) fail("%s needs an importance matrix: make one with `k3 imatrix` and pass it with --imatrix", type_name(t));
}

size_t quantize_rows(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (!can_quantize(t)) fail("quantize: type %s cannot be written", type_name(t));
  check_row(t, n_per_row);
  if (requires_imatrix(t)) detail::require_imatrix(t, imatrix);
  const size_t row_bytes = row_size(t, n_per_row);
  for (int64_t r = 0; r < nrows; ++r) {
    const float* x = src + r * n_per_row;
    void* y = static_cast<char*>(dst) + static_cast<size_t>(r) * row_bytes;
    const int64_t n = n_per_row;
    const float* qw = imatrix;
    switch (t) {
      case GgmlType::F32: std::memcpy(y, x, row_bytes); break;
      case GgmlType::F16: quantize_row_f16(x, as<uint16_t>(y), n); break;
      case GgmlType::BF16: quantize_row_bf16(x, as<uint16_t>(y), n); break;
      case GgmlType::Q4_0: quantize_row_q4_0(x, as<block_q4_0>(y), n, qw); break;
      case GgmlType::Q4_1: quantize_row_q4_1(x, as<block_q4_1>(y), n, qw); break;
      case GgmlType::Q5_0: quantize_row_q5_0(x, as<block_q5_0>(y), n, qw); break;
      case GgmlType::Q5_1: quantize_row_q5_1(x, as<block_q5_1>(y), n, qw); break;
      case GgmlType::Q8_0: quantize_row_q8_0(x, as<block_q8_0>(y), n); break;
      case GgmlType::Q2_K: quantize_row_q2_K(x, as<block_q2_K>(y), n, qw); break;
      case GgmlType::Q3_K: quantize_row_q3_K(x, as<block_q3_K>(y), n, qw); break;
      case GgmlType::Q4_K: quantize_row_q4_K(x, as<block_q4_K>(y), n, qw); break;
      case GgmlType::Q5_K: quantize_row_q5_K(x, as<block_q5_K>(y), n, qw); break;
      case GgmlType::Q6_K: quantize_row_q6_K(x, as<block_q6_K>(y), n, qw); break;
      case GgmlType::MXFP4: quantize_row_mxfp4(x, as<block_mxfp4>(y), n); break;
      case GgmlType::IQ4_NL: quantize_row_iq4_nl(x, as<block_iq4_nl>(y), n, qw); break;
      case GgmlType::IQ4_XS: quantize_row_iq4_xs(x, as<block_iq4_xs>(y), n, qw); break;
      case GgmlType::IQ2_XXS: quantize_row_iq2_xxs(x, as<block_iq2_xxs>(y), n, qw); break;
      case GgmlType::IQ2_XS: quantize_row_iq2_xs(x, as<block_iq2_xs>(y), n, qw); break;
      case GgmlType::IQ2_S: quantize_row_iq2_s(x, as<block_iq2_s>(y), n, qw); break;
      case GgmlType::IQ1_S: quantize_row_iq1_s(x, as<block_iq1_s>(y), n, qw); break;
      case GgmlType::IQ1_M: quantize_row_iq1_m(x, as<block_iq1_m>(y), n, qw); break;
      case GgmlType::Q1_0: quantize_row_q1_0(x, as<block_q1_0>(y), n); break;
      case GgmlType::Q2_0: quantize_row_q2_0(x, as<block_q2_0>(y), n); break;
      case GgmlType::TQ1_0: quantize_row_tq1_0(x, as<block_tq1_0>(y), n); break;
      case GgmlType::TQ2_0: quantize_row_tq2_0(x, as<block_tq2_0>(y), n); break;
      case GgmlType::NVFP4: quantize_row_nvfp4(x, as<block_nvfp4>(y), n); break;
      case GgmlType::IQ3_XXS: quantize_row_iq3_xxs(x, as<block_iq3_xxs>(y), n, qw); break;
      case GgmlType::IQ3_S: quantize_row_iq3_s(x, as<block_iq3_s>(y), n, qw); break;
      default: K3_ASSERT(false);
    }
  }
  return static_cast<size_t>(nrows) * row_bytes;
}

}  // namespace k3::ref
