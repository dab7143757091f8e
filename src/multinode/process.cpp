#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "multinode/multinode.h"
#include "multinode/world.h"

namespace k3::multinode {

World& world() {
  static World w;
  return w;
}

namespace {

// The job size mpirun announces (Open MPI, PMIx, PMI), 1 when not started by it.
int launched_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 1;
}

}  // namespace

void init(int& argc, char**& argv) {
  World& g = world();
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  g.host = host;
  const int n = launched_size();
  if (n <= 1) return;
#if K3_HAVE_MPI
  // The threads MPI starts must not take the signals the commands handle (k3 serve shuts down on
  // SIGTERM): they start with SIGINT and SIGTERM blocked, this thread gets its mask back.
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  g.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  MPI_Comm_dup(MPI_COMM_WORLD, &g.exit_comm);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &g.host_processes);
  MPI_Comm_free(&local);
  if (provided < MPI_THREAD_SERIALIZED) {
    if (g.rank == 0) std::fprintf(stderr, "k3: this MPI library cannot be called from several threads\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (g.rank != 0) {
    // The leader ends the job (mpirun passes SIGINT/SIGTERM to every process; the leader's server
    // shuts down gracefully and then stops the others).
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    // Only the leader writes to stdout; the others' notices would repeat its own.
    if (!std::getenv("K3_DIST_VERBOSE")) {
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDOUT_FILENO), close(null);
    }
  }
#else
  (void)argc, (void)argv;
  std::fprintf(stderr,
               "k3: started as one of %d processes, but this k3 was built without MPI: install libopenmpi-dev "
               "(tools/setup does) and rebuild\n",
               n);
  std::exit(1);
#endif
}

int finish(int status, const char* command, const std::string& error) {
  World& g = world();
  auto print = [&](bool with_rank) {
    if (error.empty()) return;
    if (with_rank)
      std::fprintf(stderr, "k3 %s: error on rank %d of %d (host %s): %s\n", command, g.rank, g.size, g.host.c_str(),
                   error.c_str());
    else
      std::fprintf(stderr, "k3 %s: error: %s\n", command, error.c_str());
    std::fflush(stderr);
  };
#if K3_HAVE_MPI
  if (!g.mpi) {
    print(false);
    return status;
  }
  if (g.rank == 0 && g.following) {
    print(false);
    g.group->send(Op::Quit);
  } else if (status != 0) {
    // Every process ending with the same error (a bad flag) meets the others here; one that fails
    // alone would leave them waiting inside a step with it (loading, a pass): stop them all.
    MPI_Request r;
    MPI_Ibarrier(g.exit_comm, &r);
    int done = 0;
    for (const auto t0 = std::chrono::steady_clock::now();
         !done && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3);)
      if (MPI_Test(&r, &done, MPI_STATUS_IGNORE), !done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!done) {
      print(g.rank != 0);
      MPI_Abort(MPI_COMM_WORLD, status);
    }
    if (g.rank == 0) print(false);
  }
  g.group.reset();
  MPI_Comm_free(&g.exit_comm);
  MPI_Finalize();
#else
  (void)command;
  print(false);
#endif
  return status;
}

bool active() { return world().mpi; }
int rank() { return world().rank; }
int size() { return world().size; }
bool leader() { return world().rank == 0; }
const std::string& host() { return world().host; }
int host_processes() { return world().host_processes; }

void sync() {
#if K3_HAVE_MPI
  if (world().mpi) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

}  // namespace k3::multinode
