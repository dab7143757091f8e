// What each tensor of a quantized Kimi-K3 file becomes: target types and named recipes, user
// rules (--tensor-type REGEX=TYPE, first match wins), the keep-F32 rules of the tensor registry,
// and the block-size fallbacks of quant-formats.md §9.
#pragma once
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "tensor/types.h"

namespace k3::quant {

// Tensor classes for the error summary (from the registry's scope and type rule).
enum class TensorClass : uint8_t { Embedding, Output, Attention, Ffn, SharedExperts, Experts, KeepF32 };
const char* class_name(TensorClass c);

// A named quantization: plain types (everything quantizable gets the type) and K3 recipes.
struct Recipe {
  std::string name;
  GgmlType dense;    // 2-D matrices (and 3-D per-head attn_k_b / attn_v_b)
  GgmlType experts;  // 3-D routed expert stacks (*_exps)
  // Applied after the user's rules; REGEX=TYPE like --tensor-type.
  std::vector<std::pair<std::string, GgmlType>> rules;
  uint32_t file_type;  // general.file_type (llama_ftype)
  std::string description;
};

// All recipes, plain types first (for --help).
const std::vector<Recipe>& recipes();
// By name, case-insensitive; throws k3::Error listing the valid names.
const Recipe& recipe_by_name(const std::string& name);
// The plain recipe of a type (its general.file_type), null if the type has none.
const Recipe* plain_recipe(GgmlType t);
// The base of a mix (--target-size, target_size.h, or --tensor-type-file alone): the K3 recipes' own
// rules (attn_k_b / attn_v_b in BF16), every other matrix left to the sizing.
Recipe sized_base_recipe();
// A type the quantizer can write, by ggml name, case-insensitive ("q4_k", "Q8_0", "bf16");
// throws k3::Error naming the flag and listing the valid names.
GgmlType parse_out_type(const std::string& name, const char* what);

struct UserRule {
  std::string text;  // "REGEX=TYPE" as given
  std::regex re;
  GgmlType type;
};
// Parses "REGEX=TYPE" (the last '=' separates); throws k3::Error for a bad regex or type.
UserRule parse_rule(const std::string& text);

// The plan of one tensor.
struct TensorPlan {
  const gguf::TensorInfo* src = nullptr;
  GgmlType type = GgmlType::F32;  // output type
  TensorClass cls = TensorClass::KeepF32;
  std::string why;               // "keep f32", "default", "rule 'exps=q2_K'", "fallback q4_K -> q5_0 (ne0 128)"
  enum class By : uint8_t { Kept, UserRule, RecipeRule, Recipe } by = By::Kept;  // what decided the type
  uint64_t out_bytes = 0;
  bool copy() const { return src->type == type; }  // bytes copied unchanged
};

struct Plan {
  std::vector<TensorPlan> tensors;  // input order
  std::shared_ptr<const std::vector<gguf::TensorInfo>> owned;  // the tensors of a plan without a file
  std::vector<std::string> warnings;
  uint32_t file_type = 0;
  uint64_t in_bytes = 0, out_bytes = 0, n_elements = 0;
};

// Decides every tensor's type. Validates the source as a Kimi-K3 model against the registry
// (missing, unexpected or mis-shaped tensors are errors naming the tensor). A user rule that
// matches no tensor, or only tensors kept in F32, is a warning.
Plan make_plan(const gguf::Model& in, const Recipe& recipe, const std::vector<UserRule>& rules);
// general.file_type of a mix: the plain type that holds most of the bytes.
void set_mix_file_type(Plan& plan);
// The same decisions for a model that exists only as hyperparameters (every tensor as the
// converter writes it: MXFP4 routed experts, BF16 matrices, F32 vectors): sizes at K3's real shapes.
Plan plan_for_shapes(const model::HParams& hp, const Recipe& recipe, const std::vector<UserRule>& rules);

}  // namespace k3::quant
