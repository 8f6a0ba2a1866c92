// Checkpoint directories: sharded writes committed by a rename, reads through the slice index,
// and the directory bookkeeping (latest step, retention, debris of interrupted saves).
//
// Durability order of a save: each rank's shard file is synced by write_safetensors before the
// ranks agree that all are written; then rank 0 writes and syncs index.json and state.json,
// syncs the temporary directory (its entries), renames it to <step> and syncs the checkpoints
// directory (the new name). A reader that sees <step>/ therefore sees every file whole.
#include "maxctx/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "maxctx/core/check.h"
#include "maxctx/core/fault_injection.h"
#include "maxctx/core/finite.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/core/log.h"
#include "maxctx/core/progress.h"
#include "maxctx/io/durable_file.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/model/model_record.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;
using model::WeightSpec;

constexpr std::string_view kCheckpointsDir = "checkpoints";
constexpr std::string_view kStateFile = "state.json";
// The unsharded (v1) checkpoint's files.
constexpr std::string_view kModelFile = "model.safetensors";
constexpr std::string_view kOptimizerFile = "optimizer.safetensors";
// Any directory entry whose name holds this is a write in progress or the debris of one.
constexpr std::string_view kTemporaryMarker = ".tmp-";
// The tag of the index parts' messages to rank 0 (no other point-to-point traffic is in flight
// on the world communicator between steps).
constexpr int kIndexPartTag = 31001;

std::string errno_text() { return std::strerror(errno); }

std::string shard_file_name(int rank) { return fmt::format("shard-{:05d}.safetensors", rank); }

// The shape Hugging Face stores: vectors (norm scales) are 1-D.
std::vector<int64_t> global_shape(const WeightSpec& spec) {
  if (spec.global_cols == 1) return {spec.global_rows};
  return {spec.global_rows, spec.global_cols};
}

// A canonical step name ("0", "120"; not "012" or "+5"), so that a step maps to one directory.
std::optional<int64_t> parse_step_name(std::string_view name) {
  if (name.empty() || (name.size() > 1 && name[0] == '0')) return std::nullopt;
  int64_t step = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), step);
  if (error != std::errc() || end != name.data() + name.size() || step < 0) return std::nullopt;
  return step;
}

// Debris of interrupted saves (or of a replaced checkpoint). Called only between saves, by the
// one rank that commits, so no temporary directory here belongs to a live write.
std::vector<std::string> remove_temporaries(const fs::path& root) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().find(kTemporaryMarker) != std::string::npos) {
      stale.push_back(it->path());
    }
  }
  if (ec) fail("cannot list checkpoint directory '{}': {}", root.string(), ec.message());
  std::vector<std::string> names;
  for (const fs::path& path : stale) {
    fs::remove_all(path, ec);
    if (ec) fail("cannot remove stale temporary '{}': {}", path.string(), ec.message());
    names.push_back(path.filename().string());
  }
  return names;
}

// Moves the finished temporary directory to `final_dir`. An existing checkpoint of the same step
// is swapped out atomically (RENAME_EXCHANGE) where the file system allows it; elsewhere it is
// moved aside first, which leaves a moment with no <step>/ but never a partial one.
void install_directory(const fs::path& tmp_dir, const fs::path& final_dir) {
  if (::rename(tmp_dir.c_str(), final_dir.c_str()) == 0) return;
  if (errno != EEXIST && errno != ENOTEMPTY) {
    fail("cannot rename '{}' to '{}': {}", tmp_dir.string(), final_dir.string(), errno_text());
  }
  std::error_code ec;
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp_dir, ec);  // now the replaced checkpoint; the next write retries
    return;
  }
  fs::path aside = tmp_dir;
  aside += "-replaced";
  if (::rename(final_dir.c_str(), aside.c_str()) != 0 ||
      ::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    fail("cannot replace checkpoint '{}' with '{}': {}", final_dir.string(), tmp_dir.string(),
         errno_text());
  }
  fs::remove_all(aside, ec);
}

std::string brief(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Parses and validates state.json of the checkpoint directory for `step` (either format).
CheckpointState parse_state(const fs::path& path, int64_t step) {
  // A state.json is a few KB; its config string is the largest part. Bounded before parsing,
  // and its nesting checked, so a hostile file cannot exhaust memory or the stack.
  const std::string text = read_input_file(path, "checkpoint state", 64 * kMiB);
  const JsonCheck check = check_json(text);
  if (check.error)
    fail("checkpoint state '{}' is not valid JSON ({})", path.string(), *check.error);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint state '{}' is not valid JSON ({})", path.string(), e.what());
  }
  if (!state.is_object()) {
    fail(
        "checkpoint state '{}' is a JSON {}, expected an object with format, step, "
        "data_position and config",
        path.string(), state.type_name());
  }
  const auto field = [&](const char* key) -> const nlohmann::json& {
    if (!state.contains(key)) {
      fail("checkpoint state '{}' has no \"{}\"; expected format, step, data_position and config",
           path.string(), key);
    }
    return state[key];
  };
  // At most 2^62: a step or a row count past that cannot come from a run, and the data stream's
  // row arithmetic (position + rows) must not overflow (issue #34 N11: 2^63 - 1).
  constexpr int64_t kMaxCount = int64_t{1} << 62;
  const auto integer = [&](const char* key) {
    const nlohmann::json& value = field(key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > kMaxCount) {
      fail("checkpoint state '{}': \"{}\" is {}, expected an integer in [0, 2^62]", path.string(),
           key, brief(value));
    }
    return value.get<int64_t>();
  };
  const nlohmann::json& format = field("format");
  CheckpointState result;
  if (format == kUnshardedCheckpointFormat) {
    result.sharded = false;
  } else if (format != kCheckpointFormat) {
    fail("checkpoint state '{}' has format {}, expected \"{}\" (or the older \"{}\")",
         path.string(), brief(format), kCheckpointFormat, kUnshardedCheckpointFormat);
  }
  result.step = integer("step");
  result.data_position = integer("data_position");
  if (result.sharded) result.num_ranks = integer("num_ranks");
  const nlohmann::json& config = field("config");
  if (!config.is_string()) {
    fail("checkpoint state '{}': \"config\" is {}, expected a string", path.string(),
         brief(config));
  }
  result.config_text = config.get<std::string>();
  if (state.contains("model")) {
    result.model = model::model_from_record(state["model"],
                                            fmt::format("checkpoint state '{}'", path.string()));
  }
  if (result.step != step) {
    fail("checkpoint state '{}' says step {}, but its directory is step {}", path.string(),
         result.step, step);
  }
  return result;
}

// The tensors of checkpoint directory `dir` whose state is `state`: its index (sharded), or its
// two whole-tensor files (v1).
io::SliceIndex checkpoint_index(const fs::path& dir, const CheckpointState& state) {
  if (state.sharded) return io::read_slice_index_file(dir / io::kSliceIndexName);
  io::SliceIndex index;
  for (const std::string_view name : {kModelFile, kOptimizerFile}) {
    std::error_code ec;
    if (!fs::is_regular_file(dir / name, ec)) {
      fail("checkpoint file '{}' is missing; an unsharded checkpoint holds {}, {} and {}",
           (dir / name).string(), kModelFile, kOptimizerFile, kStateFile);
    }
    io::add_whole_tensors(io::SafetensorsFile(dir / name), index);
  }
  return index;
}

// Why the checkpoint directory of `step` is not complete, or nullopt when it is: state.json and
// the index parse, and every file the index names exists and is long enough.
std::optional<std::string> incompleteness(const fs::path& dir, int64_t step) {
  try {
    const CheckpointState state = parse_state(dir / kStateFile, step);
    const io::SliceIndex index = checkpoint_index(dir, state);
    std::map<fs::path, uint64_t> needed;
    for (const auto& [name, t] : index) {
      for (const io::SliceLocation& s : t.slices) {
        uint64_t& end = needed[s.file];
        end = std::max(
            end, s.byte_begin + static_cast<uint64_t>(s.rect.numel()) * io::element_size(t.dtype));
      }
    }
    for (const auto& [file, end] : needed) {
      std::error_code ec;
      const uintmax_t size = fs::file_size(file, ec);
      if (ec) return fmt::format("'{}' is missing", file.string());
      if (size < end) {
        return fmt::format("'{}' is {} bytes, shorter than its index says ({}); it is truncated",
                           file.string(), size, end);
      }
    }
  } catch (const Error& e) {
    return e.what();
  }
  return std::nullopt;
}

bool is_complete(const fs::path& dir, int64_t step) { return !incompleteness(dir, step); }

// Steps with a checkpoint directory (complete or not), ascending; a plain file is no checkpoint.
std::vector<int64_t> step_directories(const fs::path& run_dir) {
  const fs::path root = run_dir / kCheckpointsDir;
  std::error_code ec;
  if (!fs::exists(root, ec)) return {};
  if (!fs::is_directory(root, ec)) {
    fail("'{}' is not a directory; a run keeps its checkpoints in a directory of that name",
         root.string());
  }
  std::vector<int64_t> steps;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::optional<int64_t> step = parse_step_name(it->path().filename().string());
    std::error_code entry_ec;  // a dangling link named like a step is no checkpoint, no error
    if (step && it->is_directory(entry_ec)) steps.push_back(*step);
  }
  if (ec) fail("cannot list checkpoint directory '{}': {}", root.string(), ec.message());
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Steps with a complete checkpoint, ascending.
std::vector<int64_t> complete_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps = step_directories(run_dir);
  std::erase_if(
      steps, [&](int64_t step) { return !is_complete(checkpoint_directory(run_dir, step), step); });
  return steps;
}

// The temporary directory of a save: rank 0's pid tells concurrent jobs' debris apart.
fs::path temporary_directory(const fs::path& run_dir, int64_t step, int64_t id) {
  return run_dir / kCheckpointsDir / fmt::format("{}{}{}", step, kTemporaryMarker, id);
}

// Makes `tmp_dir` the checkpoint of `state.step`: index, state, sync, rename (rank 0's part).
void commit_directory(const fs::path& run_dir, const fs::path& tmp_dir,
                      const CheckpointState& state, const io::SliceIndex& index) {
  io::write_slice_index_file(tmp_dir / io::kSliceIndexName, index);
  nlohmann::ordered_json state_json = {{"format", kCheckpointFormat},
                                       {"step", state.step},
                                       {"data_position", state.data_position},
                                       {"num_ranks", state.num_ranks},
                                       {"config", state.config_text}};
  if (state.model) state_json["model"] = model::model_record(*state.model);
  io::write_synced_text(tmp_dir / kStateFile, state_json.dump(2) + "\n");
  io::sync_path(tmp_dir, /*directory=*/true);
  inject_fault(FaultKind::kKillSaveCommit, state.step);
  install_directory(tmp_dir, checkpoint_directory(run_dir, state.step));
  io::sync_path(run_dir / kCheckpointsDir, /*directory=*/true);
}

// Creates the checkpoints directory and an empty temporary directory for a save.
void create_temporary(const fs::path& run_dir, const fs::path& tmp_dir) {
  std::error_code ec;
  fs::create_directories(run_dir / kCheckpointsDir, ec);
  if (ec) {
    fail("cannot create checkpoint directory '{}': {}", (run_dir / kCheckpointsDir).string(),
         ec.message());
  }
  remove_temporaries(run_dir / kCheckpointsDir);
  fs::create_directory(tmp_dir, ec);
  if (ec) fail("cannot create '{}': {}", tmp_dir.string(), ec.message());
}

// This rank's file of a save; the fault injection points of a save's middle.
io::SliceIndex write_shard(const fs::path& tmp_dir, int rank, const CheckpointState& state,
                           const StagedSlices& staged) {
  inject_fault(FaultKind::kKillSaveStart, state.step);
  io::SliceIndex written;
  const fs::path path = tmp_dir / shard_file_name(rank);
  if (staged.bytes) {
    // A staged shard, laid out as its file: straight to the disk.
    written = io::write_laid_out_slice_file(
        path, staged.slices, std::span<const std::byte>(staged.bytes.get(), staged.size),
        [&](uint64_t done, uint64_t total) {
          if (done > 0 && 2 * done >= total) inject_fault(FaultKind::kKillSaveWriting, state.step);
        });
  } else if (!staged.slices.empty()) {
    const size_t halfway = staged.slices.size() / 2;
    written = io::write_slice_file(path, staged.slices, [&](size_t i) {
      if (i == halfway) inject_fault(FaultKind::kKillSaveWriting, state.step);
    });
  }
  inject_fault(FaultKind::kWrite, state.step);  // tests: an I/O error mid-checkpoint
  inject_fault(FaultKind::kKillSaveWritten, state.step);
  return written;
}

}  // namespace

fs::path checkpoint_directory(const fs::path& run_dir, int64_t step) {
  return run_dir / kCheckpointsDir / std::to_string(step);
}

std::string moment_name(std::string_view moment, std::string_view weight) {
  return fmt::format("{}.{}", moment, weight);
}

std::optional<int64_t> latest_checkpoint_step(const fs::path& run_dir) {
  const std::vector<int64_t> all = step_directories(run_dir);
  if (all.empty()) return std::nullopt;
  // A <step>/ directory is only ever created complete (written aside, renamed into place), so
  // a newest one that is not complete was damaged afterwards. Resuming silently from an older
  // one would redo steps and drop the newest state without a word: refuse, naming the file.
  const int64_t newest = all.back();
  const fs::path newest_dir = checkpoint_directory(run_dir, newest);
  if (const std::optional<std::string> damage = incompleteness(newest_dir, newest)) {
    const std::vector<int64_t> steps = complete_steps(run_dir);
    fail(
        "the newest checkpoint '{}' is damaged ({}); move it away to resume from {}, or "
        "choose another run_name",
        newest_dir.string(), *damage,
        steps.empty() ? std::string("the start") : fmt::format("checkpoint {}", steps.back()));
  }
  return newest;
}

void remove_old_checkpoints(const fs::path& run_dir, int64_t keep) {
  if (keep <= 0) return;
  const std::vector<int64_t> steps = complete_steps(run_dir);
  const int64_t excess = static_cast<int64_t>(steps.size()) - keep;
  for (int64_t i = 0; i < excess; ++i) {
    const fs::path dir = checkpoint_directory(run_dir, steps[static_cast<size_t>(i)]);
    // Renamed aside first (one atomic step), so that an interrupted removal leaves a temporary
    // directory (removed by the next write) and never a partial <step>/ that looks damaged.
    fs::path aside = dir;
    aside += fmt::format("{}{}-removed", kTemporaryMarker, static_cast<int64_t>(::getpid()));
    std::error_code ec;
    fs::rename(dir, aside, ec);
    if (!ec) fs::remove_all(aside, ec);
    if (ec) fail("cannot remove old checkpoint '{}': {}", dir.string(), ec.message());
  }
}

std::vector<std::string> remove_partial_checkpoints(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir / kCheckpointsDir, ec)) return {};
  return remove_temporaries(run_dir / kCheckpointsDir);
}

OpenCheckpoint open_checkpoint(const fs::path& run_dir, int64_t step) {
  const fs::path dir = checkpoint_directory(run_dir, step);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const std::vector<int64_t> steps = complete_steps(run_dir);
    fail("checkpoint step {} does not exist: no directory '{}'; complete checkpoints in '{}': {}",
         step, dir.string(), (run_dir / kCheckpointsDir).string(),
         steps.empty() ? std::string("none") : fmt::format("{}", fmt::join(steps, ", ")));
  }
  const fs::path state_path = dir / kStateFile;
  // Missing only where no name is there: a FIFO, a device or a symlink loop is refused by name when
  // it is read.
  if (!fs::exists(fs::symlink_status(state_path, ec))) {
    fail("checkpoint file '{}' is missing; a checkpoint directory holds {}, {} and its shards",
         state_path.string(), kStateFile, io::kSliceIndexName);
  }
  CheckpointState state = parse_state(state_path, step);
  io::SliceIndex index = checkpoint_index(dir, state);
  return {std::move(state), io::SliceReader(std::move(index), dir.string())};
}

void check_full_state(const io::SliceReader& tensors, const std::vector<WeightSpec>& specs,
                      DType weight_dtype) {
  std::set<std::string, std::less<>> expected;
  const io::StDType dtype = io::st_dtype_of(weight_dtype);
  for (const WeightSpec& spec : specs) {
    for (const std::string& name :
         {spec.name, moment_name("adam_m", spec.name), moment_name("adam_v", spec.name)}) {
      expected.insert(name);
      const io::SlicedTensor& t = tensors.tensor(name);
      if (t.dtype != dtype) {
        fail(
            "checkpoint: tensor '{}' is {}, this run keeps its weights in {} (weight_dtype); "
            "resume with the weight_dtype the checkpoint was written with",
            name, io::st_dtype_name(t.dtype), io::st_dtype_name(dtype));
      }
      if (t.shape != global_shape(spec)) {
        fail(
            "checkpoint: tensor '{}' has shape {}, this model expects {}; the checkpoint is of a "
            "different model configuration",
            name, io::shape_string(t.shape), io::shape_string(global_shape(spec)));
      }
    }
  }
  // A weight the model lacks is named before its moments (the clearer of the two).
  std::optional<std::string> extra;
  for (const auto& [name, t] : tensors.index()) {
    if (expected.contains(name)) continue;
    const bool moment = name.starts_with("adam_m.") || name.starts_with("adam_v.");
    if (!extra || !moment) extra = name;
    if (!moment) break;
  }
  if (extra) {
    fail(
        "checkpoint holds tensor '{}', which this model does not have; the checkpoint is of a "
        "different model configuration",
        *extra);
  }
}

// ---- Saving -----------------------------------------------------------------------------

struct CheckpointSaver::Pending {
  CheckpointState state;
  std::chrono::steady_clock::time_point began;
  fs::path tmp_dir;
  StagedSlices staged;
  std::thread writer;
  std::atomic<bool> done{false};
  std::string error;       // set before done
  io::SliceIndex written;  // this rank's slices, set before done
};

CheckpointSaver::CheckpointSaver(const Communicator& world, Options options,
                                 std::function<void()> before_commit)
    : world_(world), options_(std::move(options)), before_commit_(std::move(before_commit)) {}

CheckpointSaver::~CheckpointSaver() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

void StagedSlices::Free::operator()(std::byte* p) const { std::free(p); }

int64_t CheckpointSaver::staged_bytes() const { return pending_ ? pending_->staged.size : 0; }

StagedSlices CheckpointSaver::reusable_staging() {
  finish();
  return std::exchange(reusable_, {});
}

void CheckpointSaver::save(const CheckpointState& state, StagedSlices staged) {
  finish();
  auto pending = std::make_unique<Pending>();
  pending->state = state;
  pending->state.num_ranks = world_.size();
  pending->staged = std::move(staged);
  pending->began = std::chrono::steady_clock::now();
  int64_t id = static_cast<int64_t>(::getpid());
  world_.broadcast(std::span<int64_t>(&id, 1), 0);
  pending->tmp_dir = temporary_directory(options_.run_dir, state.step, id);
  run_on_root(world_, [&] { create_temporary(options_.run_dir, pending->tmp_dir); });
  Pending* p = pending.get();
  const int rank = world_.rank();
  const auto write = [p, rank] {
    try {
      p->written = write_shard(p->tmp_dir, rank, p->state, p->staged);
    } catch (const std::exception& e) {
      p->error = e.what();
    }
    p->done.store(true, std::memory_order_release);
  };
  pending_ = std::move(pending);
  // On a thread even when synchronous, so that this one can tell the ranks that wait for it that
  // it still writes (finish()).
  pending_->writer = std::thread([write, async = options_.async] {
    // The step loop is the job's critical path: the writer yields the core to it.
    if (async) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    write();
  });
  if (options_.async) {
    poll();
  } else {
    finish();
  }
}

void CheckpointSaver::poll() {
  if (!pending_) return;
  // Whether every rank's file is written (a failed write counts as done: its error is agreed on
  // below, once nobody is still writing).
  int64_t writing = pending_->done.load(std::memory_order_acquire) ? 0 : 1;
  world_.all_reduce(std::span<int64_t>(&writing, 1), ReduceOp::kMax);
  if (writing != 0) return;
  if (pending_->writer.joinable()) pending_->writer.join();
  const std::unique_ptr<Pending> done = std::move(pending_);  // ends here, committed or not
  reusable_.bytes = std::move(done->staged.bytes);
  reusable_.capacity = done->staged.capacity;
  try {
    agree_on_errors(world_, done->error);
  } catch (const Error&) {
    // Nothing half-written stays behind: the failed save's directory goes (rank 0 alone).
    std::error_code ec;
    if (world_.rank() == 0) fs::remove_all(done->tmp_dir, ec);
    throw;
  }
  commit(*done);
}

void CheckpointSaver::finish() {
  // Until the save commits, a poll (a collective) each heartbeat in which this rank's file got
  // written or its writing progressed: a rank with little to write waits for one with much an
  // interval at a time, and a writer that is stuck still trips the watchdog (issue #34 N3).
  ProgressSince progress;
  while (pending_) {
    const auto beat =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(heartbeat_seconds());
    while (!pending_->done.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < beat) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!pending_->done.load(std::memory_order_acquire) && !progress.advanced()) continue;
    poll();
  }
}

void CheckpointSaver::commit(const Pending& p) {
  // Every rank's part of the index to rank 0: sizes to all, then the texts point to point.
  const std::string part = io::slice_index_json(p.written);
  const int64_t size = static_cast<int64_t>(part.size());
  std::vector<int64_t> sizes(static_cast<size_t>(world_.size()));
  world_.all_gather(std::span<const int64_t>(&size, 1), std::span<int64_t>(sizes));
  std::vector<std::string> parts;
  if (world_.rank() == 0) {
    parts.push_back(part);
    for (int r = 1; r < world_.size(); ++r) {
      std::string text(static_cast<size_t>(sizes[static_cast<size_t>(r)]), '\0');
      world_.send_recv(std::span<const uint8_t>(), kNoPeer,
                       std::span<uint8_t>(reinterpret_cast<uint8_t*>(text.data()), text.size()), r,
                       kIndexPartTag);
      parts.push_back(std::move(text));
    }
  } else {
    world_.send_recv(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(part.data()), part.size()), 0,
        std::span<uint8_t>(), kNoPeer, kIndexPartTag);
  }
  run_on_root(world_, [&] {
    io::SliceIndex index;
    for (const std::string& text : parts) {
      io::merge_slice_index(index, io::parse_slice_index(text, p.tmp_dir, p.tmp_dir.string()));
    }
    if (before_commit_) before_commit_();
    commit_directory(options_.run_dir, p.tmp_dir, p.state, index);
    remove_old_checkpoints(options_.run_dir, options_.keep);
    log::info(
        "saved checkpoint {} in {} ({} bytes staged on rank 0, committed {:.3f} s after "
        "the save began)",
        p.state.step, (options_.run_dir / kCheckpointsDir).string(), p.staged.size,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - p.began).count());
  });
}

// ---- One process, whole tensors ------------------------------------------------------------

namespace {

void check_whole_layout(const std::vector<WeightSpec>& specs, TensorView flat, const char* what) {
  for (const WeightSpec& spec : specs) {
    MAXCTX_CHECK(spec.rows == spec.global_rows && spec.cols == spec.global_cols,
                 "a whole state holds whole tensors; '{}' is a {}x{} block of {}x{}", spec.name,
                 spec.rows, spec.cols, spec.global_rows, spec.global_cols);
  }
  MAXCTX_CHECK_EQ(flat.numel(), model::total_numel(specs),
                  "the {} buffer must hold exactly the specs' elements", what);
}

// The three buffers' views of each tensor, under the names the checkpoint stores them by.
struct NamedTensor {
  std::string name;
  const WeightSpec* spec;
  TensorView view;
};
std::vector<NamedTensor> named_tensors(const std::vector<WeightSpec>& specs, TensorView params,
                                       TensorView adam_m, TensorView adam_v) {
  std::vector<NamedTensor> named;
  for (const WeightSpec& spec : specs) {
    const auto part = [&](TensorView flat) { return flat.elements(spec.offset, spec.numel()); };
    named.push_back({spec.name, &spec, part(params)});
    named.push_back({moment_name("adam_m", spec.name), &spec, part(adam_m)});
    named.push_back({moment_name("adam_v", spec.name), &spec, part(adam_v)});
  }
  return named;
}

TensorView flat_view(std::span<const float> values) {
  return TensorView::of(const_cast<float*>(values.data()), static_cast<int64_t>(values.size()));
}

}  // namespace

void write_checkpoint(const fs::path& run_dir, const CheckpointState& state,
                      const std::vector<WeightSpec>& specs, TensorView params, TensorView adam_m,
                      TensorView adam_v) {
  check_whole_layout(specs, params, "parameter");
  check_whole_layout(specs, adam_m, "adam_m");
  check_whole_layout(specs, adam_v, "adam_v");
  MAXCTX_CHECK(adam_m.dtype() == params.dtype() && adam_v.dtype() == params.dtype(),
               "parameters and moments of one dtype");
  MAXCTX_CHECK(state.step >= 0 && state.data_position >= 0, "step {} and data position {}",
               state.step, state.data_position);
  StagedSlices whole;  // borrowed: the buffers outlive the write
  for (const NamedTensor& t : named_tensors(specs, params, adam_m, adam_v)) {
    whole.slices.push_back(
        {t.name, io::st_dtype_of(params.dtype()), global_shape(*t.spec),
         io::Rect{0, 0, t.spec->global_rows, t.spec->global_cols},
         std::span<const std::byte>(static_cast<const std::byte*>(t.view.raw()), t.view.bytes())});
  }
  CheckpointState one_rank = state;
  one_rank.num_ranks = 1;
  const fs::path tmp_dir = temporary_directory(run_dir, state.step, ::getpid());
  create_temporary(run_dir, tmp_dir);
  try {
    const io::SliceIndex written = write_shard(tmp_dir, 0, one_rank, whole);
    commit_directory(run_dir, tmp_dir, one_rank, written);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
    throw;
  }
}

void write_checkpoint(const fs::path& run_dir, const CheckpointState& state,
                      const std::vector<WeightSpec>& specs, std::span<const float> params,
                      std::span<const float> adam_m, std::span<const float> adam_v) {
  write_checkpoint(run_dir, state, specs, flat_view(params), flat_view(adam_m), flat_view(adam_v));
}

CheckpointState read_checkpoint(const fs::path& run_dir, int64_t step,
                                const std::vector<WeightSpec>& specs, TensorView params,
                                TensorView adam_m, TensorView adam_v) {
  check_whole_layout(specs, params, "parameter");
  check_whole_layout(specs, adam_m, "adam_m");
  check_whole_layout(specs, adam_v, "adam_v");
  const OpenCheckpoint checkpoint = open_checkpoint(run_dir, step);
  check_full_state(checkpoint.tensors, specs, params.dtype());
  for (const NamedTensor& t : named_tensors(specs, params, adam_m, adam_v)) {
    checkpoint.tensors.read(t.name, io::Rect{0, 0, t.spec->global_rows, t.spec->global_cols},
                            t.view);
    if (const std::optional<int64_t> bad = first_non_finite(t.view)) {
      fail(
          "checkpoint '{}': tensor '{}' holds a non-finite value (NaN or Inf) at element {}; the "
          "file is damaged or the run had diverged when it was saved",
          checkpoint_directory(run_dir, step).string(), t.name, *bad);
    }
  }
  return checkpoint.state;
}

CheckpointState read_checkpoint(const fs::path& run_dir, int64_t step,
                                const std::vector<WeightSpec>& specs, std::span<float> params,
                                std::span<float> adam_m, std::span<float> adam_v) {
  return read_checkpoint(run_dir, step, specs, flat_view(params), flat_view(adam_m),
                         flat_view(adam_v));
}

}  // namespace maxctx::train
