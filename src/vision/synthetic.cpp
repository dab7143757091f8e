#include "vision/synthetic.h"

#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/synth_rng.h"
#include "gguf/writer.h"
#include "tensor/fp16.h"
#include "vision/registry.h"

namespace k3::vision {

VisionSynthOptions vision_synth_preset(const std::string& preset, uint32_t n_proj) {
  VisionSynthOptions o;
  VisionHParams& hp = o.hp;
  if (preset == "k3") {
    hp.n_proj = n_proj ? n_proj : 7168;
    o.name = "k3-synthetic-vision-k3";
  } else if (preset == "tiny") {
    hp.n_layer = 2, hp.n_embd = 64, hp.n_head = 2, hp.head_dim = 48, hp.n_ff = 128;
    hp.pos_h = hp.pos_w = 16, hp.proj_hidden = 256, hp.n_proj = n_proj ? n_proj : 64;
    hp.in_patch_limit = 4096;
  } else {
    fail("unknown vision preset '%s' (tiny, k3)", preset.c_str());
  }
  return o;
}

void write_synthetic_mmproj(const std::string& path, const VisionSynthOptions& o) {
  const VisionHParams& hp = o.hp;
  hp.validate();
  if (o.type != GgmlType::F32 && o.type != GgmlType::F16 && o.type != GgmlType::BF16)
    fail("make-tiny --vision-type: %s (f32, f16 or bf16; k3 quantize makes the others)", type_name(o.type));
  gguf::Metadata meta;
  hp.to_metadata(meta);
  meta.set("general.name", gguf::Value::str(o.name));
  meta.set("general.file_type", gguf::Value::u32(o.type == GgmlType::F32 ? 0 : o.type == GgmlType::F16 ? 1 : 32));
  std::vector<VTensor> ts;
  std::vector<gguf::TensorSpec> specs;
  for_each_vision_tensor(hp, [&](const VTensor& t) {
    ts.push_back(t);
    specs.push_back({t.name, o.type, t.ne});
  });
  gguf::Writer w(path, std::move(meta), specs);
  std::vector<float> v;
  std::vector<uint16_t> h;
  for (const VTensor& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    SynthRng rng(o.seed, t.name);
    const bool vec = t.ne.size() == 1;
    const double mean = vec ? 1.0 : 0.0;
    const double fan_in = t.ne.size() == 4 ? double(t.ne[0] * t.ne[1] * t.ne[2]) : double(t.ne[0]);  // patch kernel: 3·p·p
    const double sd = vec ? 0.1 : t.name == "v.position_embd.weight" ? 0.5 : 1.0 / std::sqrt(fan_in);
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(mean + sd * rng.normal());
    if (o.type == GgmlType::F32) {
      w.write(v.data(), v.size() * sizeof(float));
      continue;
    }
    h.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = o.type == GgmlType::BF16 ? fp32_to_bf16(v[i]) : fp32_to_fp16(v[i]);
    w.write(h.data(), h.size() * sizeof(uint16_t));
  }
  w.finish();
}

}  // namespace k3::vision
