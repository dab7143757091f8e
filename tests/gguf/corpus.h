// Valid and hostile GGUF files for the bad-input suite and as fuzzing seeds, all encoded by the
// independent test builder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "builder.h"

namespace gguf_test {

struct CaseFile {
  std::string name;
  std::vector<uint8_t> bytes;
};

struct Case {
  std::string id;               // a gtest-safe name
  std::vector<CaseFile> files;  // files[0] is the one given to the reader
  std::string blame;            // the file the message must name (default files[0])
  std::string expect;           // a substring distinctive of this failure
};

// A small valid model with every section (KVs incl. arrays, three tensors, padding).
Doc base_doc();
// A valid three-part split set s-0000N-of-00003.gguf with one tensor per part.
std::vector<Doc> split_docs();
// base_doc plus a tensor of every type of kLowBitTypes.
Doc lowbit_doc();
std::vector<CaseFile> valid_files();
std::vector<Case> hostile_cases();

}  // namespace gguf_test
