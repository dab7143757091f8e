#include "convert/emit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "convert/mxfp4_repack.h"
#include "tensor/fp16.h"
#include "vision/registry.h"

namespace k3::convert {

using model::Transform;

namespace {
constexpr size_t kChunk = 4u << 20;  // bytes per output chunk

size_t ggml_elem_size(GgmlType t) { return t == GgmlType::F32 ? 4 : 2; }
}  // namespace

bool same_repr(st::DType src, GgmlType dst) {
  return (src == st::DType::BF16 && dst == GgmlType::BF16) || (src == st::DType::F16 && dst == GgmlType::F16) ||
         (src == st::DType::F32 && dst == GgmlType::F32);
}

void dtype_to_f32(st::DType src, const uint8_t* in, float* out, size_t n) {
  switch (src) {
    case st::DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
      }
      return;
    case st::DType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
      }
      return;
    case st::DType::F32: std::memcpy(out, in, 4 * n); return;
    default: fail("internal: dtype %s is not a float type", st::dtype_name(src));
  }
}

void f32_to_type(GgmlType dst, const float* in, uint8_t* out, size_t n) {
  switch (dst) {
    case GgmlType::F32: std::memcpy(out, in, 4 * n); return;
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = fp32_to_bf16(in[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = fp32_to_fp16(in[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default: fail("internal: cannot write type %s", type_name(dst));
  }
}

namespace {

class Emitter {
 public:
  Emitter(const Plan& p, Sink& out) : p_(p), out_(out) {}

  void run(const OutTensor& t) {
    switch (t.xf) {
      case Transform::None:
        if (t.permute_qk) return permute_qk(t);
        [[fallthrough]];
      case Transform::ToF32:
      case Transform::ReshapeConv: convert_span(t.src[0], t.type, 0, t.src[0].t->nelements()); break;
      case Transform::NegExpALog: alog(t); break;
      case Transform::FuseScore: fuse(t); break;
      case Transform::SplitKb: split_kb(t); break;
      case Transform::SplitVb: split_vb(t); break;
      case Transform::StackExperts:
        if (t.mxfp4)
          stack_mxfp4(t);
        else
          for (const SrcRef& s : t.src) convert_span(s, t.type, 0, s.t->nelements());
        break;
    }
  }

 private:
  void release(const SrcRef& s, const uint8_t* p, size_t n) { p_.shards[s.shard]->release(p, n); }

  // Elements [first, first + count) of a float source, written as `type`.
  void convert_span(const SrcRef& s, GgmlType type, int64_t first, int64_t count) {
    const size_t es = st::dtype_size(s.t->dtype);
    const uint8_t* base = s.t->data + first * es;
    if (same_repr(s.t->dtype, type)) {
      const uint64_t n = static_cast<uint64_t>(count) * es;
      for (uint64_t off = 0; off < n; off += kChunk) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(kChunk, n - off));
        out_.put(base + off, m);
        release(s, base + off, m);
      }
      return;
    }
    const size_t per = kChunk / 4;
    f32_.resize(per);
    buf_.resize(per * ggml_elem_size(type));
    for (int64_t i = 0; i < count; i += per) {
      const size_t m = static_cast<size_t>(std::min<int64_t>(per, count - i));
      dtype_to_f32(s.t->dtype, base + i * es, f32_.data(), m);
      f32_to_type(type, f32_.data(), buf_.data(), m);
      out_.put(buf_.data(), m * ggml_elem_size(type));
      release(s, base + i * es, m * es);
    }
  }

  // mmproj attn_qkv: the same rows in the order of vision.md §3, bytes unchanged.
  void permute_qk(const OutTensor& t) {
    const SrcRef& s = t.src[0];
    K3_ASSERT(same_repr(s.t->dtype, t.type));
    const size_t row = static_cast<size_t>(t.ne[0]) * st::dtype_size(s.t->dtype);
    const int64_t rows = t.ne[1];
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(kChunk / row));
    buf_.resize(static_cast<size_t>(per) * row);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
      const int64_t n = std::min(per, rows - r0);
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(buf_.data() + r * row, s.t->data + vision::qkv_source_row(r0 + r, p_.vision) * row, row);
      out_.put(buf_.data(), n * row);
    }
    release(s, s.t->data, s.t->nbytes());
  }

  std::vector<float> floats(const SrcRef& s, int64_t n) {
    std::vector<float> v(n);
    dtype_to_f32(s.t->dtype, s.t->data, v.data(), n);
    return v;
  }

  void alog(const OutTensor& t) {
    const int64_t n = t.ne[0];
    std::vector<float> a = floats(t.src[0], n);
    for (float& x : a) x = -std::exp(x);  // float32 exp (conversion.md §3.3)
    out_.put(a.data(), 4 * n);
  }

  void fuse(const OutTensor& t) {
    const int64_t n = t.ne[0];
    std::vector<float> norm = floats(t.src[0], n), proj = floats(t.src[1], n);
    for (int64_t q = 0; q < n; ++q) norm[q] *= proj[q];
    out_.put(norm.data(), 4 * n);
  }

  // W = kv_b [heads·(d_nope + d_v), r_kv]; k_b(i, j, h) = W[h·(d_nope+d_v) + i][j], stored with
  // i fastest: per head a [r_kv, d_nope] matrix (conversion.md §3.6).
  void split_kb(const OutTensor& t) {
    const SrcRef& s = t.src[0];
    const size_t es = st::dtype_size(s.t->dtype);
    const size_t os = ggml_elem_size(t.type);
    const int64_t rows = t.d_nope + t.d_v, R = t.r_kv, D = t.d_nope;
    const bool raw = same_repr(s.t->dtype, t.type);
    std::vector<uint8_t> head(static_cast<size_t>(R * D) * os);
    std::vector<float> src_f(raw ? 0 : static_cast<size_t>(D * R)), dst_f(raw ? 0 : static_cast<size_t>(D * R));
    for (int64_t h = 0; h < t.heads; ++h) {
      const uint8_t* w = s.t->data + static_cast<size_t>(h * rows * R) * es;  // D rows of R
      if (raw) {
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < R; ++j) std::memcpy(&head[(j * D + i) * os], w + (i * R + j) * es, es);
      } else {
        dtype_to_f32(s.t->dtype, w, src_f.data(), D * R);
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < R; ++j) dst_f[j * D + i] = src_f[i * R + j];
        f32_to_type(t.type, dst_f.data(), head.data(), D * R);
      }
      out_.put(head.data(), head.size());
    }
  }

  // v_b(j, m, h) = W[h·(d_nope+d_v) + d_nope + m][j]: per head, rows d_nope.. copied as they are.
  void split_vb(const OutTensor& t) {
    const int64_t rows = t.d_nope + t.d_v, R = t.r_kv;
    for (int64_t h = 0; h < t.heads; ++h) convert_span(t.src[0], t.type, (h * rows + t.d_nope) * R, t.d_v * R);
  }

  void stack_mxfp4(const OutTensor& t) {
    const int64_t groups = t.cols / 32;
    const int64_t row_out = groups * 17;
    const int64_t rows_per = std::max<int64_t>(1, static_cast<int64_t>(kChunk) / row_out);
    buf_.resize(static_cast<size_t>(rows_per * row_out));
    for (size_t e = 0; e + 1 < t.src.size(); e += 2) {
      const SrcRef& pk = t.src[e];
      const SrcRef& sc = t.src[e + 1];
      for (int64_t r = 0; r < t.rows; r += rows_per) {
        const int64_t n = std::min(rows_per, t.rows - r);
        const uint8_t* p = pk.t->data + r * groups * 16;
        const uint8_t* q = sc.t->data + r * groups;
        mxfp4_repack_rows(p, q, buf_.data(), n, t.cols);
        out_.put(buf_.data(), static_cast<size_t>(n * row_out));
        release(pk, p, n * groups * 16);
        release(sc, q, n * groups);
      }
    }
  }

  const Plan& p_;
  Sink& out_;
  std::vector<uint8_t> buf_;
  std::vector<float> f32_;
};

}  // namespace

void emit_tensor(const Plan& plan, const OutTensor& t, Sink& out) { Emitter(plan, out).run(t); }

}  // namespace k3::convert
