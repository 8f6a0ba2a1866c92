// gtest main for every maxctx test binary, single- or multi-rank.
//
// Ranks other than 0 print only their failures (prefixed with the rank), so an 8-rank run reads
// like a 1-rank one. The exit code is the maximum over ranks: a failure on any rank fails the
// test on every rank, and ctest sees it once. The MpiRuntime here is what makes a failed
// MAXCTX_CHECK abort every rank (it installs core's abort hook).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/runtime.h"

namespace {

class FailureOnlyPrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailureOnlyPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  maxctx::MpiRuntime runtime(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (runtime.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailureOnlyPrinter(runtime.rank()));
  }
  int32_t any_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  maxctx::Communicator::world().all_reduce<int32_t>({&any_failed, 1}, maxctx::ReduceOp::kMax);
  return any_failed;
}
