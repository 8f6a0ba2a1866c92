#include "maxctx/mesh/runtime.h"

#include <mpi.h>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"

namespace maxctx {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  // FUNNELED: only the main thread calls MPI; OpenMP threads inside kernels never do.
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MAXCTX_CHECK_GE(provided, MPI_THREAD_FUNNELED, "the MPI library lacks MPI_THREAD_FUNNELED");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  log::set_rank(rank_, world_size_);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace maxctx
