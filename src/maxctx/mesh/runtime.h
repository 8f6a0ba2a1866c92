// The process's MPI lifetime: MPI_Init_thread on construction, MPI_Finalize on destruction. In
// between, core/ is told which rank this is (log::set_rank, also the rank a failed check prints)
// and how to take the whole job down (set_abort_hook: MPI_Abort on MPI_COMM_WORLD), since core/
// itself knows no MPI. One per process, owned by main(); MPI is the launcher and bootstrap of
// every backend, so a process without an MpiRuntime has no Communicator::world().
#pragma once

namespace maxctx {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace maxctx
