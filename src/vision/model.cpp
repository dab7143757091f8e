#include "vision/model.h"

#include <map>

#include "common/error.h"
#include "common/mmap.h"
#include "tensor/kernels.h"
#include "vision/registry.h"

namespace k3::vision {

namespace {

std::vector<float> floats(const gguf::TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.nelements()));
  kernels(t.type).to_float(t.data, v.data(), t.nelements());
  return v;
}

}  // namespace

std::unique_ptr<VisionModel> VisionModel::load(const std::string& path) {
  std::unique_ptr<VisionModel> m(new VisionModel());
  m->path_ = path;
  m->file_ = gguf::Model::open(path);
  const gguf::Model& f = m->file_;
  VisionHParams& hp = m->hp_;
  try {
    hp = VisionHParams::from_metadata(f.meta());
    const gguf::TensorInfo& pos = f.get("v.position_embd.weight");
    const gguf::TensorInfo& mm1 = f.get("mm.1.weight");
    hp.pos_w = static_cast<uint32_t>(pos.ne[1]), hp.pos_h = static_cast<uint32_t>(pos.ne[2]);
    hp.proj_hidden = static_cast<uint32_t>(mm1.ne[1]);
    hp.validate();
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }

  std::map<std::string, const gguf::TensorInfo*> got;
  for (const gguf::TensorInfo* t : f.tensors()) got[t->name] = t;
  std::map<std::string, const gguf::TensorInfo*> bound;
  for_each_vision_tensor(hp, [&](const VTensor& v) {
    auto it = got.find(v.name);
    if (it == got.end()) fail("%s: missing tensor '%s' (%s)", path.c_str(), v.name.c_str(), hp.summary().c_str());
    const gguf::TensorInfo& t = *it->second;
    const std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (ne != v.ne) {
      std::string want = "[";
      for (size_t i = 0; i < v.ne.size(); ++i) want += (i ? ", " : "") + std::to_string(v.ne[i]);
      fail("%s: tensor '%s' has shape %s, expected %s from the metadata (%s)", path.c_str(), v.name.c_str(),
           t.shape_string().c_str(), (want + "]").c_str(), hp.summary().c_str());
    }
    const QuantKernels& k = kernels(t.type);
    if (!k.to_float) fail("%s: tensor '%s' has type %s, which k3 cannot compute with", path.c_str(), v.name.c_str(), type_name(t.type));
    if (!v.matrix && type_info(t.type).block != 1)
      fail("%s: tensor '%s' has type %s; norms, the patch kernel and the position table must be F32, F16 or BF16",
           path.c_str(), v.name.c_str(), type_name(t.type));
    bound[v.name] = &t;
    got.erase(it);
  });
  if (!got.empty())
    fail("%s: tensor '%s' has no place in a %s mmproj with this metadata (%s)", path.c_str(), got.begin()->first.c_str(),
         kProjectorType, hp.summary().c_str());

  auto mat = [&](const std::string& n) {
    const gguf::TensorInfo& t = *bound.at(n);
    return WeightView{t.type, t.data, t.ne[0], t.ne[1], row_size(t.type, t.ne[0])};
  };
  VisionWeights& w = m->w_;
  w.patch = floats(*bound.at("v.patch_embd.weight"));
  w.pos = floats(*bound.at("v.position_embd.weight"));
  for (uint32_t i = 0; i < hp.n_layer; ++i) {
    const std::string b = strprintf("v.blk.%u.", i);
    w.blocks.push_back({floats(*bound.at(b + "ln1.weight")), floats(*bound.at(b + "ln2.weight")), mat(b + "attn_qkv.weight"),
                        mat(b + "attn_out.weight"), mat(b + "ffn_up.weight"), mat(b + "ffn_down.weight")});
  }
  w.post_ln = floats(*bound.at("v.post_ln.weight"));
  w.mm1 = mat("mm.1.weight");
  w.mm2 = mat("mm.2.weight");
  w.mm_norm = floats(*bound.at("mm.post_norm.weight"));
  for (const auto& file : f.files()) populate_pages(file->base(), file->size());
  return m;
}

}  // namespace k3::vision
