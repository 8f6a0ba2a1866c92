// The process's MPI lifetime: MPI_Init_thread on construction, MPI_Finalize on destruction. In
// between, core/ is told which rank this is (log::set_rank, also the rank a failed check prints)
// and how to take the whole job down (set_abort_hook: MPI_Abort on MPI_COMM_WORLD), since core/
// itself knows no MPI. One per process, owned by main(); MPI is the launcher and bootstrap of
// every backend, so a process without an MpiRuntime has no Communicator::world().
#pragma once

#include <string>

namespace maxctx {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // The end of a command that failed with a maxctx::Error on this rank (issue #34 N2). An error
  // every rank raised alike (config checks, run_on_root) is printed once, by rank 0, and every
  // rank returns 1. One that only some ranks raised (a file only this rank reads, a rank-local
  // check) cannot wait for the others, who may sit in a collective or compute: after
  // kErrorAgreementSeconds without every rank reporting an error, this rank prints its line,
  // prefixed with its rank, and ends the job (MPI_Abort). Ranks that all failed with different
  // messages print one line each, prefixed. Returns the exit code where it returns.
  int finish_with_error(const std::string& message);
  static constexpr double kErrorAgreementSeconds = 5;

 private:
  int rank_ = 0;
  int world_size_ = 1;
  // A duplicate of MPI_COMM_WORLD for finish_with_error's barrier alone, so that it cannot match a
  // collective a healthy rank has posted on the world (an MPI_Comm, kept opaque here).
  void* error_comm_ = nullptr;
};

}  // namespace maxctx
