#include "tensor/types.h"

#include <cctype>
#include <iterator>

#include "common/error.h"

namespace k3 {

namespace {
using T = GgmlType;
constexpr TypeInfo kTypes[] = {
    {T::F32, "f32", 1, 4, true},         {T::F16, "f16", 1, 2, true},
    {T::Q4_0, "q4_0", 32, 18, true},     {T::Q4_1, "q4_1", 32, 20, true},
    {T::Q5_0, "q5_0", 32, 22, true},     {T::Q5_1, "q5_1", 32, 24, true},
    {T::Q8_0, "q8_0", 32, 34, true},     {T::Q8_1, "q8_1", 32, 36, true},
    {T::Q2_K, "q2_K", 256, 84, true},    {T::Q3_K, "q3_K", 256, 110, true},
    {T::Q4_K, "q4_K", 256, 144, true},   {T::Q5_K, "q5_K", 256, 176, true},
    {T::Q6_K, "q6_K", 256, 210, true},   {T::Q8_K, "q8_K", 256, 292, true},
    {T::IQ2_XXS, "iq2_xxs", 256, 66, true}, {T::IQ2_XS, "iq2_xs", 256, 74, true},
    {T::IQ3_XXS, "iq3_xxs", 256, 98, true}, {T::IQ1_S, "iq1_s", 256, 50, true},
    {T::IQ4_NL, "iq4_nl", 32, 18, true}, {T::IQ3_S, "iq3_s", 256, 110, true},
    {T::IQ2_S, "iq2_s", 256, 82, true}, {T::IQ4_XS, "iq4_xs", 256, 136, true},
    {T::I8, "i8", 1, 1, false},          {T::I16, "i16", 1, 2, false},
    {T::I32, "i32", 1, 4, false},        {T::I64, "i64", 1, 8, false},
    {T::F64, "f64", 1, 8, false},        {T::IQ1_M, "iq1_m", 256, 56, true},
    {T::BF16, "bf16", 1, 2, true},       {T::TQ1_0, "tq1_0", 256, 54, true},
    {T::TQ2_0, "tq2_0", 256, 66, true}, {T::MXFP4, "mxfp4", 32, 17, true},
    {T::NVFP4, "nvfp4", 64, 36, true},  {T::Q1_0, "q1_0", 128, 18, true},
    {T::Q2_0, "q2_0", 64, 18, true},
};
// The same bytes per element as the file types they come from, so row sizes and strides do not
// change (Q8_0_X8, MXFP4_LANES: 8 blocks as one).
constexpr TypeInfo kLanes[] = {{T::Q4_K_LANES, "q4_K_lanes", 256, 144, true},
                               {T::Q2_K_SB, "q2_K_sb", 256, 84, true},
                               {T::Q8_0_X8, "q8_0_x8", 256, 272, true},
                               {T::MXFP4_LANES, "mxfp4_lanes", 256, 136, true}};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}
}  // namespace

const TypeInfo* type_info(uint32_t id) {
  for (const TypeInfo& ti : kTypes)
    if (static_cast<uint32_t>(ti.type) == id) return &ti;
  return nullptr;
}

const TypeInfo* find_type(GgmlType t) {
  for (const TypeInfo& ti : kLanes)
    if (ti.type == t) return &ti;
  return type_info(static_cast<uint32_t>(t));
}

const TypeInfo& type_info(GgmlType t) {
  const TypeInfo* ti = find_type(t);
  K3_ASSERT(ti != nullptr);
  return *ti;
}

const TypeInfo* type_by_name(std::string_view name) {
  for (const TypeInfo& ti : kTypes)
    if (iequal(ti.name, name)) return &ti;
  return nullptr;
}

}  // namespace k3
