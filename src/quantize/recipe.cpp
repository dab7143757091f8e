#include "quantize/recipe.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <memory>

#include "common/error.h"
#include "model/hparams.h"
#include "model/registry.h"
#include "spec/draft_file.h"
#include "tensor/quant_ref.h"
#include "vision/model.h"

namespace k3::quant {

const char* class_name(TensorClass c) {
  switch (c) {
    case TensorClass::Embedding: return "embedding";
    case TensorClass::Output: return "output";
    case TensorClass::Attention: return "attention";
    case TensorClass::Ffn: return "ffn";
    case TensorClass::SharedExperts: return "shared_experts";
    case TensorClass::Experts: return "experts";
    case TensorClass::KeepF32: return "f32_kept";
  }
  return "?";
}

namespace {

using T = GgmlType;

// llama_ftype values for general.file_type (gguf-contract.md §3.1).
Recipe plain(T t, uint32_t ftype, const char* desc) { return Recipe{type_name(t), t, t, {}, ftype, desc}; }

// A type ggml writes only with an importance matrix: token_embd, which no imatrix covers (it is
// looked up, not multiplied), gets Q2_K, as llama-quantize gives it for these file types.
Recipe needs_imatrix(T t, uint32_t ftype, const char* bpw) {
  Recipe r = plain(t, ftype, "");
  r.rules = {{"^token_embd\\.weight$", T::Q2_K}};
  r.description = std::string(bpw) + " (fallback IQ4_NL; needs --imatrix; token_embd Q2_K)";
  return r;
}

// attn_k_b / attn_v_b stay BF16 in the K3 recipes: llama.cpp's AMX path mishandles F16 and Q8_0
// there (model.md §9), and they are small.
const char* kKbVb = "attn_k_b|attn_v_b";

std::vector<Recipe> make_recipes() {
  std::vector<Recipe> r = {
      plain(T::F32, 0, "32 bpw, all matrices F32"),
      plain(T::F16, 1, "16 bpw"),
      plain(T::BF16, 32, "16 bpw"),
      plain(T::Q8_0, 7, "8.5 bpw"),
      plain(T::Q6_K, 18, "6.56 bpw (fallback Q8_0)"),
      plain(T::Q5_K, 16, "5.5 bpw (fallback Q5_1)"),
      plain(T::Q5_1, 9, "6 bpw"),
      plain(T::Q5_0, 8, "5.5 bpw"),
      plain(T::Q4_K, 14, "4.5 bpw (fallback Q5_0)"),
      plain(T::Q4_1, 3, "5 bpw"),
      plain(T::Q4_0, 2, "4.5 bpw"),
      plain(T::IQ4_XS, 30, "4.25 bpw (fallback IQ4_NL)"),
      plain(T::IQ4_NL, 25, "4.5 bpw"),
      plain(T::NVFP4, 39, "4.5 bpw (fallback MXFP4)"),
      plain(T::MXFP4, 38, "4.25 bpw, every matrix MXFP4"),
      plain(T::Q3_K, 11, "3.44 bpw (fallback Q4_0)"),
      plain(T::IQ3_S, 26, "3.44 bpw (fallback IQ4_NL)"),
      plain(T::IQ3_XXS, 23, "3.06 bpw (fallback IQ4_NL)"),
      plain(T::Q2_K, 10, "2.63 bpw (fallback Q4_0)"),
      plain(T::IQ2_S, 28, "2.56 bpw (fallback IQ4_NL)"),
      needs_imatrix(T::IQ2_XS, 20, "2.31 bpw"),
      plain(T::Q2_0, 41, "2.25 bpw (fallback Q4_0)"),
      plain(T::TQ2_0, 37, "2.06 bpw, ternary (fallback Q4_0)"),
      needs_imatrix(T::IQ2_XXS, 19, "2.06 bpw"),
      plain(T::IQ1_M, 31, "1.75 bpw (fallback IQ4_NL)"),
      plain(T::TQ1_0, 36, "1.69 bpw, ternary (fallback Q4_0)"),
      needs_imatrix(T::IQ1_S, 24, "1.56 bpw"),
      plain(T::Q1_0, 40, "1.13 bpw, one bit and a scale per 128 (fallback Q4_0)"),
  };
  r.push_back({"MXFP4_MOE", T::Q8_0, T::MXFP4, {{kKbVb, T::BF16}}, 38,
               "MXFP4 routed experts (lossless from the checkpoint), Q8_0 everything else"});
  r.push_back({"Q4_K_K3", T::Q6_K, T::Q4_K, {{kKbVb, T::BF16}}, 15, "Q4_K routed experts, Q6_K everything else"});
  r.push_back({"Q3_K_K3", T::Q5_K, T::Q3_K, {{kKbVb, T::BF16}}, 12, "Q3_K routed experts, Q5_K everything else"});
  r.push_back({"Q2_K_K3", T::Q4_K, T::Q2_K, {{kKbVb, T::BF16}}, 10, "Q2_K routed experts, Q4_K everything else"});
  return r;
}

bool iequals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string recipe_names() {
  std::string s;
  for (const auto& r : recipes()) s += (s.empty() ? "" : ", ") + r.name;
  return s;
}

}  // namespace

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> r = make_recipes();
  return r;
}

const Recipe& recipe_by_name(const std::string& name) {
  for (const auto& r : recipes())
    if (iequals(r.name, name)) return r;
  fail("unknown quantization type '%s' (valid: %s)", name.c_str(), recipe_names().c_str());
}

const Recipe* plain_recipe(GgmlType t) {
  for (const auto& r : recipes())
    if (r.rules.empty() && r.dense == t && r.experts == t) return &r;
  return nullptr;
}

void set_mix_file_type(Plan& plan) {
  std::map<GgmlType, uint64_t> bytes;
  for (const TensorPlan& tp : plan.tensors) bytes[tp.type] += tp.out_bytes;
  uint64_t most = 0;
  for (const auto& [t, b] : bytes)
    if (const Recipe* r = plain_recipe(t); r && b > most) most = b, plan.file_type = r->file_type;
}

Recipe sized_base_recipe() {
  return {"mix", T::Q8_0, T::Q8_0, {{kKbVb, T::BF16}}, 7, "types per tensor: --target-size or --tensor-type-file"};
}

GgmlType parse_out_type(const std::string& name, const char* what) {
  const TypeInfo* t = type_by_name(name);
  if (!t || !ref::can_quantize(t->type)) {
    std::string valid;
    for (const auto& r : recipes())
      if (type_by_name(r.name)) valid += (valid.empty() ? "" : ", ") + std::string(type_name(r.dense));
    fail("%s: unknown or unwritable type '%s' (valid: %s)", what, name.c_str(), valid.c_str());
  }
  return t->type;
}

UserRule parse_rule(const std::string& text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    fail("--tensor-type: expected REGEX=TYPE, got '%s'", text.c_str());
  UserRule r;
  r.text = text;
  const std::string pattern = text.substr(0, eq);
  try {
    r.re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail("--tensor-type '%s': bad regular expression '%s' (%s)", text.c_str(), pattern.c_str(), e.what());
  }
  r.type = parse_out_type(text.substr(eq + 1), ("--tensor-type '" + text + "'").c_str());
  return r;
}

namespace {

// What a tensor is to the plan: kept (F32 for the text model, its own type for the mmproj) or a
// matrix of a class, with the registry entry that bounds its types (null for the mmproj).
struct Kind {
  bool keep = false;
  GgmlType keep_type = GgmlType::F32;
  const char* keep_why = "keep f32";
  TensorClass cls = TensorClass::KeepF32;
  const model::TensorDef* def = nullptr;
  bool per_head = false;  // a draft's attn_k_b / attn_v_b: F32, F16, BF16 or Q8_0
};

using Classify = std::function<Kind(const gguf::TensorInfo&)>;

// A text-model tensor by its registry entry.
Classify classify_text(const std::map<std::string, const model::TensorDef*, std::less<>>& defs,
                       const std::vector<UserRule>& rules) {
  return [&defs, &rules](const gguf::TensorInfo& ti) {
    const model::TensorDef& def = *defs.at(ti.name);
    Kind k;
    k.def = &def;
    // The router stays F32 like the other small tensors unless a user rule names it.
    const bool router_ruled = def.types == model::TypeRule::Router &&
                              std::any_of(rules.begin(), rules.end(),
                                          [&](const UserRule& u) { return std::regex_search(ti.name, u.re); });
    if (def.types == model::TypeRule::KeepF32 || ti.n_dims == 1 || (def.types == model::TypeRule::Router && !router_ruled)) {
      k.keep = true;
      return k;
    }
    const std::string& name = ti.name;
    if (def.types == model::TypeRule::Experts) k.cls = TensorClass::Experts;
    else if (name.find("_shexp") != std::string::npos) k.cls = TensorClass::SharedExperts;
    else if (name == "token_embd.weight") k.cls = TensorClass::Embedding;
    else if (name == "output.weight") k.cls = TensorClass::Output;
    else if (def.scope == model::Scope::KDA || def.scope == model::Scope::MLA) k.cls = TensorClass::Attention;
    else k.cls = TensorClass::Ffn;
    return k;
  };
}

// The text model: every tensor checked against the registry by bind_weights.
Classify text_model(const gguf::Model& in, std::map<std::string, const model::TensorDef*, std::less<>>& defs,
                    model::HParams& hp, const std::vector<UserRule>& rules) {
  const std::string& path = in.files().front()->path();
  try {
    hp = model::HParams::from_metadata(in.meta());
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
  model::bind_weights(in, hp);  // every tensor present, expected, of the right shape and a computable type
  model::for_each_tensor(hp, [&](const model::TensorRef& r) { defs[r.name] = &r.def; });
  return classify_text(defs, rules);
}

// An mmproj (vision.md §2): the matrices are quantized like dense ones, the norms, patch kernel
// and position table keep their stored type.
Classify mmproj(const gguf::Model& in) {
  vision::VisionModel::load(in.files().front()->path());  // every tensor present and of the right shape
  return [](const gguf::TensorInfo& ti) {
    Kind k;
    const bool matrix = ti.name.find("attn_") != std::string::npos || ti.name.find("ffn_") != std::string::npos ||
                        ti.name == "mm.1.weight" || ti.name == "mm.2.weight";
    if (!matrix) {
      k.keep = true;
      k.keep_type = ti.type;
      k.keep_why = "keep (vision norm, patch kernel or position table)";
      return k;
    }
    k.cls = ti.name.find("attn_") != std::string::npos ? TensorClass::Attention : TensorClass::Ffn;
    return k;
  };
}

// A DSpark draft (dspark.md §3.2): gains stay F32; the 2-D matrices are quantized like dense
// ones; attn_k_b / attn_v_b take only F32, F16, BF16 or Q8_0, so any other type becomes Q8_0 there.
Classify dspark(const gguf::Model& in) {
  const std::string& path = in.files().front()->path();
  spec::DraftParams p;
  try {
    p = spec::DraftParams::from_metadata(in.meta());
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
  spec::bind_draft(in, p);  // every tensor present, expected and of the right shape
  auto rules = std::make_shared<std::map<std::string, spec::DraftRule, std::less<>>>();
  for (const spec::DraftTensor& d : spec::draft_tensors(p)) (*rules)[d.name] = d.rule;
  return [rules](const gguf::TensorInfo& ti) {
    Kind k;
    const spec::DraftRule r = rules->at(ti.name);
    if (r == spec::DraftRule::F32) {
      k.keep = true;
      k.keep_why = "keep f32 (draft gain)";
      return k;
    }
    k.per_head = r == spec::DraftRule::PerHead;
    k.cls = ti.name == "token_embd.weight" ? TensorClass::Embedding
            : ti.name.find("attn_") != std::string::npos ? TensorClass::Attention
                                                         : TensorClass::Ffn;
    return k;
  };
}

// Every tensor's type, in the given order.
Plan plan_tensors(const std::vector<const gguf::TensorInfo*>& tensors, const Classify& classify, const Recipe& recipe,
                  const std::vector<UserRule>& rules) {
  std::vector<std::regex> recipe_res;
  for (const auto& [pat, t] : recipe.rules) recipe_res.emplace_back(pat, std::regex::ECMAScript);
  std::vector<int> hits(rules.size(), 0), kept_hits(rules.size(), 0), raw_hits(rules.size(), 0);

  Plan plan;
  plan.file_type = recipe.file_type;
  for (const gguf::TensorInfo* ti : tensors) {
    const Kind kind = classify(*ti);
    TensorPlan tp;
    tp.src = ti;
    tp.cls = kind.cls;
    if (kind.keep) {
      tp.type = kind.keep_type;
      tp.why = kind.keep_why;
      for (size_t i = 0; i < rules.size(); ++i)
        if (std::regex_search(ti->name, rules[i].re)) ++kept_hits[i];
    } else {
      const std::string& name = ti->name;
      GgmlType want = tp.cls == TensorClass::Experts ? recipe.experts : recipe.dense;
      tp.why = "recipe";
      tp.by = TensorPlan::By::Recipe;
      for (size_t i = 0; i < rules.size(); ++i)
        if (std::regex_search(name, rules[i].re)) ++raw_hits[i];
      bool matched = false;
      for (size_t i = 0; i < rules.size() && !matched; ++i)
        if (std::regex_search(name, rules[i].re)) {
          want = rules[i].type;
          tp.why = "rule '" + rules[i].text + "'";
          tp.by = TensorPlan::By::UserRule;
          ++hits[i];
          matched = true;
        }
      for (size_t i = 0; i < recipe_res.size() && !matched; ++i)
        if (std::regex_search(name, recipe_res[i])) {
          want = recipe.rules[i].second;
          tp.why = "recipe rule '" + recipe.rules[i].first + "'";
          tp.by = TensorPlan::By::RecipeRule;
          matched = true;
        }
      tp.type = model::fallback_type(want, ti->ne[0]);
      if (kind.per_head && !spec::draft_type_allowed(spec::DraftRule::PerHead, tp.type, ti->ne[0], nullptr)) {
        tp.type = ti->ne[0] % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
        tp.why += strprintf(", %s (a draft's per-head matrices take f32, f16, bf16 or q8_0)", type_name(tp.type));
      }
      if (tp.type != want)
        tp.why += strprintf(", fallback %s -> %s (ne0 %lld)", type_name(want), type_name(tp.type),
                            static_cast<long long>(ti->ne[0]));
      std::string why;
      if (kind.def && !model::type_allowed(*kind.def, tp.type, ti->ne[0], &why))
        fail("tensor '%s': cannot store it as %s: %s", name.c_str(), type_name(tp.type), why.c_str());
    }
    tp.out_bytes = row_size(tp.type, ti->ne[0]) * static_cast<uint64_t>(ti->ne[1] * ti->ne[2] * ti->ne[3]);
    plan.in_bytes += ti->nbytes;
    plan.out_bytes += tp.out_bytes;
    plan.n_elements += static_cast<uint64_t>(ti->nelements());
    plan.tensors.push_back(std::move(tp));
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    if (raw_hits[i] == 0 && kept_hits[i] == 0)
      plan.warnings.push_back(strprintf("--tensor-type '%s' matches no tensor", rules[i].text.c_str()));
    else if (raw_hits[i] == 0)
      plan.warnings.push_back(strprintf("--tensor-type '%s' matches only tensors kept in f32 (%d); it has no effect",
                                        rules[i].text.c_str(), kept_hits[i]));
    else if (hits[i] == 0)
      plan.warnings.push_back(strprintf("--tensor-type '%s': every tensor it matches is taken by an earlier rule",
                                        rules[i].text.c_str()));
  }
  return plan;
}

}  // namespace

Plan make_plan(const gguf::Model& in, const Recipe& recipe, const std::vector<UserRule>& rules) {
  const std::string& path = in.files().front()->path();
  const auto arch = in.meta().get_str_opt("general.architecture");
  std::map<std::string, const model::TensorDef*, std::less<>> defs;
  model::HParams hp;
  Classify classify;
  if (arch && *arch == vision::kArch) classify = mmproj(in);
  else if (arch && *arch == model::kArch) classify = text_model(in, defs, hp, rules);
  else if (arch && *arch == spec::kDraftArch) classify = dspark(in);
  else
    fail("%s: general.architecture is '%s', the quantizer handles '%s' models, their '%s' mmproj files and '%s' "
         "drafts",
         path.c_str(), arch ? arch->c_str() : "(missing)", model::kArch, vision::kArch, spec::kDraftArch);
  return plan_tensors(in.tensors(), classify, recipe, rules);
}

Plan plan_for_shapes(const model::HParams& hp, const Recipe& recipe, const std::vector<UserRule>& rules) {
  std::map<std::string, const model::TensorDef*, std::less<>> defs;
  auto infos = std::make_shared<std::vector<gguf::TensorInfo>>();
  model::for_each_tensor(hp, [&](const model::TensorRef& r) {
    defs[r.name] = &r.def;
    gguf::TensorInfo ti;
    ti.name = r.name;
    ti.n_dims = r.shape.n_dims;
    std::copy(r.shape.ne, r.shape.ne + 4, ti.ne);
    ti.type = r.def.types == model::TypeRule::KeepF32 || ti.n_dims == 1 ? GgmlType::F32
              : r.def.types == model::TypeRule::Experts                  ? GgmlType::MXFP4
                                                                         : GgmlType::BF16;
    ti.nbytes = row_size(ti.type, ti.ne[0]) * static_cast<uint64_t>(ti.ne[1] * ti.ne[2] * ti.ne[3]);
    infos->push_back(std::move(ti));
  });
  std::vector<const gguf::TensorInfo*> tensors;
  for (const auto& ti : *infos) tensors.push_back(&ti);
  Plan plan = plan_tensors(tensors, classify_text(defs, rules), recipe, rules);
  plan.owned = std::move(infos);
  return plan;
}

}  // namespace k3::quant
