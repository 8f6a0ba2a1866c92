#include "maxctx/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace maxctx::log {
namespace {

int g_rank = 0;
int g_world_size = 1;

bool all_ranks_requested() {
  const char* value = std::getenv("MAXCTX_LOG_ALL_RANKS");
  return value != nullptr && std::strcmp(value, "0") != 0 && value[0] != '\0';
}

}  // namespace

void set_rank(int rank_id, int size) {
  g_rank = rank_id;
  g_world_size = size;
}

int rank() { return g_rank; }
int world_size() { return g_world_size; }

namespace {
std::atomic<bool> g_info_to_stderr{false};
}  // namespace

void set_info_to_stderr(bool to_stderr) { g_info_to_stderr = to_stderr; }

void write_line(bool to_stderr, bool every_rank, const std::string& line) {
  const bool all = every_rank || all_ranks_requested();
  if (!all && g_rank != 0) return;
  std::string text =
      all && g_world_size > 1 ? fmt::format("[rank {}] {}\n", g_rank, line) : line + "\n";
  FILE* stream = to_stderr || g_info_to_stderr ? stderr : stdout;
  std::fwrite(text.data(), 1, text.size(), stream);
  std::fflush(stream);
}

}  // namespace maxctx::log
