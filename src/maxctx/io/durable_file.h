// Files that are on disk when the call returns: the small text files of a checkpoint (its index,
// its state) and the directory entries that make a checkpoint visible. Every failure is a
// maxctx::Error naming the path and the system's reason.
#pragma once

#include <filesystem>
#include <string>

namespace maxctx::io {

// Creates or truncates `path` (a symlink there is refused, not followed), writes `text`, fsyncs.
void write_synced_text(const std::filesystem::path& path, const std::string& text);
// fsync of a file or of a directory (its entries: a new or renamed name inside it).
void sync_path(const std::filesystem::path& path, bool directory);

}  // namespace maxctx::io
