// Shared by the server unit tests: a tiny synthetic K3 model written once per test binary.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>

#include "model/model.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace k3::server::test {

struct TinyModel {
  std::string path;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tok::Tokenizer> tok;
};

inline const TinyModel& tiny_model() {
  static TinyModel* m = [] {
    auto* t = new TinyModel;
    t->path = "/tmp/k3_server_test_" + std::to_string(getpid()) + ".gguf";
    model::SynthOptions o = model::synth_preset("tiny");
    model::write_synthetic(t->path, o);
    t->model = model::Model::load(t->path);
    t->tok = tok::Tokenizer::from_metadata(t->model->meta());
    std::remove(t->path.c_str());  // mapped; the file is no longer needed
    return t;
  }();
  return *m;
}

}  // namespace k3::server::test
