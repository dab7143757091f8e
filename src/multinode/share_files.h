// Files of one process's share (docs/multinode.md, "Per-process files"): `k3 split IN PREFIX --tp N
// [--pp K]` writes PREFIX-rankR-of-P.gguf for each of the P = N x K processes, each with the tensors
// its placement holds cut to its share (model/registry.h; the router whole, which the expert
// store's prefetch reads whole), every whole tensor it needs, the metadata, and the k3.share.* keys
// (model/placement.h) naming its process and the model it was cut from. Under mpirun, -m PREFIX or
// any one of the files makes each process open its own; the loader refuses a file made for another
// process, and the processes check they hold shares of one model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace k3::multinode {

// PREFIX-rankR-of-P.gguf
std::string share_path(const std::string& prefix, int rank, int processes);
// The file process `rank` of `processes` opens for -m `path`: its own share file when `path` names
// one (or their prefix, when no file of that name exists), else `path` itself.
std::string share_file_for(const std::string& path, int rank, int processes);

// What identifies the model a file holds, for the processes of one job to compare: its parts'
// sizes and headers and the first and last 64 KiB of each data blob; a share file carries its
// whole file's (k3.share.model).
std::string model_fingerprint(const gguf::Model& file);

}  // namespace k3::multinode
