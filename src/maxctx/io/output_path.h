// Where a command will write, checked before its work starts: a run directory, an export
// directory, a benchmark's JSON, a trace. A path that cannot be written is one error line at the
// start (every rank ends with it when rank 0 checks inside run_on_root), not after minutes of
// training or benchmarking, and nothing is half-written.
#pragma once

#include <filesystem>
#include <string_view>

namespace maxctx::io {

// Whether `dir` can be made and written, without making it (nothing is left behind when the
// command fails later): the nearest part of the path that exists must be a directory in which a
// probe file can be created (and is removed). A file where a directory must go, a directory that
// is not writable or a read-only filesystem is an error "<what> '<dir>' cannot be written:
// <reason>".
void check_output_directory(const std::filesystem::path& dir, std::string_view what);

// Whether the file `path` can be written, without writing or creating anything: its directory
// checked as above, and `path` itself, when it exists, not a directory and open for writing (it
// is neither truncated nor changed here). The message names the file.
void check_output_file(const std::filesystem::path& path, std::string_view what);

// `path`, when it exists, is a directory (a run's checkpoints/, tensorboard/, ...): a file there
// is an error "<what> '<path>' is not a directory".
void expect_directory_or_absent(const std::filesystem::path& path, std::string_view what);

}  // namespace maxctx::io
