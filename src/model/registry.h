// The one table of every Kimi-K3 tensor (gguf-contract.md §5, conversion.md §2): GGUF name, HF
// source name, shape as a function of the hyperparameters, when it exists, which types it may
// have, and the weights field it binds to. The loader, make-tiny, and later the converter and the
// quantizer all enumerate tensors through for_each_tensor(), so they agree by construction.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/hparams.h"
#include "model/placement.h"
#include "model/weights.h"

namespace k3::model {

// Which layers a tensor belongs to.
enum class Scope : uint8_t { Global, Layer, KDA, MLA, Dense, MoE };
// Extra condition on top of the scope.
enum class When : uint8_t { Always, AttnRes, QLora, NoQLora, AttnGate, Latent, RoutedNorm, Shexp };
// Allowed storage types. KeepF32: norms, gains, conv, score vectors, biases, ssm_a (llama.cpp's
// graph uses them element-wise or in ssm_conv, which its CPU backend computes only in F32).
// Matrix: any type k3 can compute whose block size divides ne0. Experts: the same, for 3-D stacks
// used through mul_mat_id. Router: a Matrix that the converter and the quantizer's recipes keep in
// F32, as llama-quantize does, unless a user rule names it (routing decisions are sensitive).
enum class TypeRule : uint8_t { KeepF32, Matrix, Experts, Router };
// What the converter does to the HF source (conversion.md §2-§4).
enum class Transform : uint8_t { None, ToF32, FuseScore, ReshapeConv, NegExpALog, SplitKb, SplitVb, StackExperts };
// How the loader shares a tensor among the processes of a tensor-parallel group (placement.h):
// whole on each, or a balanced contiguous share of one axis, in single rows or in whole heads (the
// axis holds n_head[il] equal groups, so a head's weights and state stay on one process). Every
// cut is a byte range of the file, except axis 1 of an expert stack: the same rows of each expert.
struct Cut {
  enum Kind : uint8_t { Whole, Rows, Heads } kind = Whole;
  uint8_t axis = 0;
};

struct Shape {
  uint32_t n_dims = 1;
  int64_t ne[4] = {1, 1, 1, 1};
  std::string str() const;
  bool operator==(const Shape& o) const;
};

struct TensorDef {
  const char* gguf;  // printf pattern with one %u for the layer ("blk.%u.attn_q.weight")
  const char* hf;    // source name(s) under language_model., "%u" = layer, "{E}" = expert index, "+" = fused pair
  Scope scope;
  When when;
  TypeRule types;
  Transform transform;
  Cut cut;
  Shape (*shape)(const HParams& hp, uint32_t il);
  Tensor Weights::*global = nullptr;     // for Scope::Global
  Tensor LayerWeights::*layer = nullptr;  // for the other scopes
};

inline constexpr uint32_t kNoLayer = UINT32_MAX;

// One entry of the enumeration: definition, layer (kNoLayer for globals), full name, shape.
struct TensorRef {
  const TensorDef& def;
  uint32_t il;
  std::string name;
  Shape shape;
};

// The weights field entry r binds to.
inline Tensor& bound(Weights& w, const TensorRef& r) {
  return r.def.global ? w.*(r.def.global) : w.layers[r.il].*(r.def.layer);
}
inline const Tensor& bound(const Weights& w, const TensorRef& r) {
  return r.def.global ? w.*(r.def.global) : w.layers[r.il].*(r.def.layer);
}

// Every tensor the hyperparameters need, in a fixed order (token_embd, layers 0..L-1 each
// attention then FFN tensors, output_res_score, output_norm, output).
void for_each_tensor(const HParams& hp, const std::function<void(const TensorRef&)>& fn);
size_t tensor_count(const HParams& hp);

// The whole table (for tools that list it, e.g. the converter's name map).
const TensorDef* tensor_defs(size_t* n);

// Whether `t` may store tensor `def` with row length ne0 (reason in *why if not).
bool type_allowed(const TensorDef& def, GgmlType t, int64_t ne0, std::string* why);
// llama-quantize's fallback when ne0 is not a multiple of the block size (quant-formats.md §9):
// Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ 256-blocks -> IQ4_NL, then F16.
GgmlType fallback_type(GgmlType want, int64_t ne0);

// Binds every tensor of `file` to `w` by the table; throws k3::Error naming the tensor for a
// missing, mis-shaped or unsupported-type tensor and for any tensor the table does not expect.
// Sets the presence features of hp (attn gate, routed norm, shared experts) from the file.
// Only the share of `where` is bound: the layers of its stage (token_embd on the first stage, the
// head on the last), each tensor cut as its table entry says.
Weights bind_weights(const gguf::Model& file, HParams& hp, const Placement& where = {});

}  // namespace k3::model
