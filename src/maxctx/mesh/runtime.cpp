// MpiRuntime (see runtime.h). The abort hook is installed as soon as MPI is up, before the first
// check that could fail, and removed before MPI_Finalize: MPI_Abort is only legal in between.
#include "maxctx/mesh/runtime.h"

#include <mpi.h>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/mesh/collective_watchdog.h"

namespace maxctx {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  // FUNNELED: only the main thread calls MPI; OpenMP threads inside kernels never do.
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  log::set_rank(rank_, world_size_);
  set_abort_hook([] { MPI_Abort(MPI_COMM_WORLD, 1); });
  MAXCTX_CHECK_GE(provided, MPI_THREAD_FUNNELED, "the MPI library lacks MPI_THREAD_FUNNELED");
}

MpiRuntime::~MpiRuntime() {
  stop_collective_watchdog();
  set_abort_hook({});
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace maxctx
