// Rank-aware logging on fmt.
//
// `info` is the job's voice: rank 0 only (set MAXCTX_LOG_ALL_RANKS=1 to hear every rank, each
// line prefixed `[rank r]`). `rank_info` always prints, prefixed, from whichever rank calls it.
// `warn` goes to stderr from rank 0. Lines are written whole with one fwrite, so lines from
// different ranks do not interleave mid-line.
#pragma once

#include <fmt/format.h>

#include <string>

namespace maxctx::log {

// Called once by the mesh runtime after MPI_Init; before that every process believes it is rank 0
// of 1. A failed MAXCTX_CHECK prints this rank too.
void set_rank(int rank, int world_size);
int rank();
int world_size();

void write_line(bool to_stderr, bool every_rank, const std::string& line);
// Sends `info` and `rank_info` lines to stderr instead of stdout: for a command whose stdout is a
// machine-read document (`maxctx plan --json`), so progress lines cannot corrupt it.
void set_info_to_stderr(bool to_stderr);

template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  write_line(false, false, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void rank_info(fmt::format_string<Args...> format, Args&&... args) {
  write_line(false, true, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  write_line(true, false, "warning: " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace maxctx::log
