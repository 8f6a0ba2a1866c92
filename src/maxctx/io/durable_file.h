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

// The end of a write into the temporary `tmp` (open as `fd`, synced unless `failure` says why
// not): closes it and renames it to `path`. Returns the first failure (the one given, the
// close's or the rename's), `tmp` then removed, or "" once `path` is in place.
std::string close_and_rename(int fd, const std::filesystem::path& tmp,
                             const std::filesystem::path& path, std::string failure);

}  // namespace maxctx::io
