// One Kimi-K3 model across several processes started by mpirun (docs/multinode.md). Each process
// holds a share of the weights (model/placement.h: pipeline stages of tensor-parallel groups), the
// leader (rank 0) runs the command and talks to the user, the network and stdout, and the others
// run the leader's forward passes (follow). Every output element is computed by exactly one
// process with the single-process arithmetic, so results are bit-identical at any process count.
//
//   int main(argc, argv) { multinode::init(argc, argv); ... return multinode::finish(status, "run", error); }
//   auto m = multinode::load(path, pp);                 // in a model command, every process
//   ... RunOptions opt{&pool, ...};
//   if (!multinode::leader()) return multinode::follow(*m, opt);
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace k3::cache {
class Peers;
}

namespace k3::multinode {

// Joins the MPI job when k3 was started by mpirun (MPI initialised, the others' stdout silenced);
// alone otherwise. A k3 built without MPI refuses to run as several processes.
void init(int& argc, char**& argv);
// The end of the process with a command's exit status and error message ("" if none), printed
// here: once when every process ends with it (a bad flag), else naming this process's rank and
// host. The leader tells the others to stop; a process failing alone aborts the whole job (the
// others may be inside a step with it). Returns the status.
int finish(int status, const char* command, const std::string& error);

bool active();  // several processes
int rank();
int size();
bool leader();  // rank 0, or alone
const std::string& host();
int host_processes();  // processes of the job on this machine (1 alone)

// The model, as this process's share: `pp` pipeline stages, the processes of each stage in tensor
// parallel. All processes call it; they must have the same file and run the same kernels (else a
// k3::Error on every one naming the ranks that differ). Alone: Model::load.
std::unique_ptr<model::Model> load(const std::string& path, int pp = 1);

// Every process waits here for the others (nothing alone): the leader does a step first.
void sync();

// The leader's channel for its prompt cache (each process keeps its share of every cached state:
// cache/peers.h); null alone and on the others.
cache::Peers* cache_peers();

// A process other than the leader: runs the leader's passes until it finishes; returns the
// command's exit status.
int follow(const model::Model& m, const model::RunOptions& opt);

// Per-process figures for --json (one entry alone); every process takes part (the leader asks).
struct RankStats {
  int rank = 0;
  std::string host;
  uint64_t weight_bytes = 0, rss_bytes = 0, rss_file_bytes = 0;  // held weights; resident (of it: mapped file)
  double comm_seconds = 0;          // time inside communication calls
  uint64_t messages = 0, bytes = 0;  // exchanges this process took part in, bytes it received
  uint64_t tokens = 0;               // rows of the passes it ran
  double messages_per_token() const { return tokens ? double(messages) / double(tokens) : 0; }
};
std::vector<RankStats> stats(const model::Model& m);

}  // namespace k3::multinode
