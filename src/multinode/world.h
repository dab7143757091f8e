// The process's place in the MPI job (multinode.h's functions read it; process.cpp starts and ends it).
#pragma once
#include <memory>
#include <string>

#if K3_HAVE_MPI
#include "multinode/mpi_group.h"
#endif

namespace k3::multinode {

struct World {
  bool mpi = false;  // this process joined an MPI job of several
  int rank = 0, size = 1, host_processes = 1;
  std::string host;
  bool following = false;  // the leader: the others reached follow() (a Quit ends them)
#if K3_HAVE_MPI
  MPI_Comm exit_comm = MPI_COMM_NULL;  // for the end only, apart from every other exchange
  std::unique_ptr<MpiGroup> group;
#endif
};
World& world();

}  // namespace k3::multinode
