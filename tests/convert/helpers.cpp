#include "helpers.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "gguf/gguf.h"

namespace k3::test {

namespace fs = std::filesystem;

model::SynthOptions tiny_options(GgmlType type, GgmlType expert_type) {
  model::SynthOptions o = model::synth_preset("tiny");
  o.type = type;
  o.expert_type = expert_type;
  o.seed = 7;
  return o;
}

Checkpoint make_checkpoint(const std::string& dir, const model::SynthOptions& o, const convert::HfLayout& lay) {
  Checkpoint c{dir + "/ref.gguf", dir + "/hf"};
  model::write_synthetic(c.gguf, o);
  convert::write_hf_checkpoint(c.gguf, c.hf, lay);
  return c;
}

convert::ConvertOptions convert_options(const std::string& src, const std::string& out, int jobs) {
  convert::ConvertOptions o;
  o.plan.src = src;
  o.out_dir = out;
  o.jobs = jobs;
  o.quiet = true;
  return o;
}

std::string compare_tensors(const std::string& expected, const std::string& first) {
  gguf::Model a = gguf::Model::open(expected);
  gguf::Model b = gguf::Model::open(first);
  for (const gguf::TensorInfo* t : a.tensors()) {
    const gguf::TensorInfo* u = b.find(t->name);
    if (!u) return "missing tensor " + t->name;
    if (u->type != t->type) return t->name + ": type " + type_name(u->type) + ", expected " + type_name(t->type);
    if (u->shape_string() != t->shape_string()) return t->name + ": shape " + u->shape_string() + ", expected " + t->shape_string();
    if (u->nbytes != t->nbytes || std::memcmp(u->data, t->data, t->nbytes) != 0) return t->name + ": bytes differ";
  }
  if (a.tensors().size() != b.tensors().size())
    return "tensor count " + std::to_string(b.tensors().size()) + ", expected " + std::to_string(a.tensors().size());
  return "";
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string first_part(const std::string& out_dir) {
  for (const auto& n : list_dir(out_dir))
    if (n.find("-00001-of-") != std::string::npos && n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0)
      return out_dir + "/" + n;
  return "";
}

}  // namespace k3::test
