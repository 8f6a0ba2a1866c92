#include "maxctx/core/check.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace maxctx {
namespace {

CheckHandler& check_handler() {
  static CheckHandler handler;
  return handler;
}

int world_rank_or_zero() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace

void set_check_handler(CheckHandler handler) { check_handler() = std::move(handler); }

void check_failed(const char* file, int line, const std::string& what) {
  const std::string message = fmt::format("{}:{}: {}", file, line, what);
  if (check_handler()) {
    check_handler()(message);
  }
  std::fprintf(stderr, "[rank %d] %s\n", world_rank_or_zero(), message.c_str());
  std::fflush(stderr);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::abort();
}

}  // namespace maxctx
