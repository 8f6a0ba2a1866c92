#include "maxctx/core/progress.h"

#include <atomic>

namespace maxctx {
namespace {

std::atomic<uint64_t> g_progress{0};

}  // namespace

void note_progress() { g_progress.fetch_add(1, std::memory_order_relaxed); }
uint64_t progress_count() { return g_progress.load(std::memory_order_relaxed); }

}  // namespace maxctx
