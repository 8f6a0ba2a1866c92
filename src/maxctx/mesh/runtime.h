// The process's MPI lifetime: MPI_Init_thread on construction, MPI_Finalize on destruction, and
// the logger told which rank this is. One per process, owned by main().
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
