// MpiRuntime (see runtime.h). The abort hook is installed as soon as MPI is up, before the first
// check that could fail, and removed before MPI_Finalize: MPI_Abort is only legal in between.
#include "maxctx/mesh/runtime.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

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
  auto* error_comm = new MPI_Comm;
  MPI_Comm_dup(MPI_COMM_WORLD, error_comm);
  error_comm_ = error_comm;
}

MpiRuntime::~MpiRuntime() {
  stop_collective_watchdog();
  auto* error_comm = static_cast<MPI_Comm*>(error_comm_);
  MPI_Comm_free(error_comm);
  delete error_comm;
  set_abort_hook({});
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiRuntime::finish_with_error(const std::string& raw_message) {
  const std::string message = printable(raw_message);
  if (world_size_ == 1) {
    std::fprintf(stderr, "maxctx: error: %s\n", message.c_str());
    return 1;
  }
  MPI_Comm comm = *static_cast<MPI_Comm*>(error_comm_);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &request);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kErrorAgreementSeconds);
  int everyone_failed = 0;
  while (true) {
    MPI_Test(&request, &everyone_failed, MPI_STATUS_IGNORE);
    if (everyone_failed || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Some rank is still working or waiting elsewhere: it would never learn of this error.
  if (!everyone_failed) abort_job(message);
  // Every rank failed: the same message is printed once, different ones once per rank.
  const auto hash = static_cast<unsigned long long>(std::hash<std::string>{}(message));
  unsigned long long lowest = 0, highest = 0;
  MPI_Allreduce(&hash, &lowest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  MPI_Allreduce(&hash, &highest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  if (lowest != highest) {
    std::fprintf(stderr, "maxctx: error: [rank %d] %s\n", rank_, message.c_str());
  } else if (rank_ == 0) {
    std::fprintf(stderr, "maxctx: error: %s\n", message.c_str());
  }
  return 1;
}

}  // namespace maxctx
