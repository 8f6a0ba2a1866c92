// Checkpoint directories: write to a temporary directory, sync, rename; read back with every
// tensor's name, dtype and shape checked against the model's weight specs before a byte is copied.
//
// Durability order: each safetensors file is synced by write_safetensors, state.json here, then
// the temporary directory (its entries), then, after the rename, the checkpoints directory (the
// new name). A reader that sees <step>/ therefore sees all three files whole.
#include "maxctx/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "maxctx/core/check.h"
#include "maxctx/core/fault_injection.h"
#include "maxctx/core/finite.h"
#include "maxctx/io/safetensors.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;
using model::WeightSpec;

constexpr std::string_view kCheckpointsDir = "checkpoints";
constexpr std::string_view kModelFile = "model.safetensors";
constexpr std::string_view kOptimizerFile = "optimizer.safetensors";
constexpr std::string_view kStateFile = "state.json";
// Any directory entry whose name holds this is a write in progress or the debris of one.
constexpr std::string_view kTemporaryMarker = ".tmp-";

std::string errno_text() { return std::strerror(errno); }

// The shape Hugging Face stores: vectors (norm scales) are 1-D.
std::vector<int64_t> global_shape(const WeightSpec& spec) {
  if (spec.global_cols == 1) return {spec.global_rows};
  return {spec.global_rows, spec.global_cols};
}

void check_layout(const std::vector<WeightSpec>& specs, size_t buffer_size, const char* what) {
  for (const WeightSpec& spec : specs) {
    MAXCTX_CHECK(spec.rows == spec.global_rows && spec.cols == spec.global_cols,
                 "checkpoints hold whole tensors; '{}' is a {}x{} shard of {}x{}: gather it first",
                 spec.name, spec.rows, spec.cols, spec.global_rows, spec.global_cols);
    MAXCTX_CHECK(
        spec.offset >= 0 && spec.offset + spec.numel() <= static_cast<int64_t>(buffer_size),
        "'{}' at [{}, {}) lies outside the {} buffer of {} elements", spec.name, spec.offset,
        spec.offset + spec.numel(), what, buffer_size);
  }
  MAXCTX_CHECK_EQ(static_cast<int64_t>(buffer_size), model::total_numel(specs),
                  "the {} buffer must hold exactly the specs' elements", what);
}

// A canonical step name ("0", "120"; not "012" or "+5"), so that a step maps to one directory.
std::optional<int64_t> parse_step_name(std::string_view name) {
  if (name.empty() || (name.size() > 1 && name[0] == '0')) return std::nullopt;
  int64_t step = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), step);
  if (error != std::errc() || end != name.data() + name.size() || step < 0) return std::nullopt;
  return step;
}

void sync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) fail("cannot open '{}' to sync it: {}", path.string(), errno_text());
  const bool ok = ::fsync(fd) == 0;
  const std::string reason = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) fail("cannot sync '{}': {}", path.string(), reason);
}

void write_synced_text(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '{}': {}", path.string(), errno_text());
  const char* data = text.data();
  size_t left = text.size();
  bool ok = true;
  while (ok && left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    ok = written >= 0;
    if (ok) {
      data += written;
      left -= static_cast<size_t>(written);
    }
  }
  ok = ok && ::fsync(fd) == 0;
  std::string reason = ok ? "" : errno_text();
  if (::close(fd) != 0 && ok) {
    ok = false;
    reason = errno_text();
  }
  if (!ok) fail("cannot write '{}': {}", path.string(), reason);
}

// Debris of an interrupted write (or of a replaced checkpoint) is removed; there is one writer
// per run directory, so no temporary directory here belongs to a live write.
void remove_temporaries(const fs::path& root) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().find(kTemporaryMarker) != std::string::npos) {
      stale.push_back(it->path());
    }
  }
  if (ec) fail("cannot list checkpoint directory '{}': {}", root.string(), ec.message());
  for (const fs::path& path : stale) {
    fs::remove_all(path, ec);
    if (ec) fail("cannot remove stale temporary '{}': {}", path.string(), ec.message());
  }
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

// Parses and validates state.json of the checkpoint directory for `step`.
CheckpointState parse_state(const fs::path& path, int64_t step) {
  std::ifstream in(path);
  if (!in) fail("checkpoint state '{}' cannot be read: {}", path.string(), errno_text());
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
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
  const auto integer = [&](const char* key) {
    const nlohmann::json& value = field(key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      fail("checkpoint state '{}': \"{}\" is {}, expected a non-negative integer", path.string(),
           key, brief(value));
    }
    return value.get<int64_t>();
  };
  const nlohmann::json& format = field("format");
  if (!format.is_string() || format.get<std::string>() != kCheckpointFormat) {
    fail("checkpoint state '{}' has format {}, expected \"{}\"", path.string(), brief(format),
         kCheckpointFormat);
  }
  CheckpointState result;
  result.step = integer("step");
  result.data_position = integer("data_position");
  const nlohmann::json& config = field("config");
  if (!config.is_string()) {
    fail("checkpoint state '{}': \"config\" is {}, expected a string", path.string(),
         brief(config));
  }
  result.config_text = config.get<std::string>();
  if (result.step != step) {
    fail("checkpoint state '{}' says step {}, but its directory is step {}", path.string(),
         result.step, step);
  }
  return result;
}

// Why the checkpoint directory of `step` is not complete, or nullopt when it is.
std::optional<std::string> incompleteness(const fs::path& dir, int64_t step) {
  std::error_code ec;
  for (const std::string_view file : {kModelFile, kOptimizerFile}) {
    if (!fs::is_regular_file(dir / file, ec)) {
      return fmt::format("'{}' is missing", (dir / file).string());
    }
  }
  try {
    parse_state(dir / kStateFile, step);
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

struct TensorTarget {
  std::string name;
  std::vector<int64_t> shape;
  TensorView out;  // in the weights' dtype: the file must hold the same
};

// Weights are written in their own dtype (f32 or bf16: the run's weight_dtype).
io::StDType file_dtype(DType dtype) { return io::st_dtype_of(dtype); }

// Validates every tensor of the file against `targets` (present, F32, right shape, nothing
// extra) and only then copies them.
void read_tensors(const fs::path& path, const std::vector<TensorTarget>& targets) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    fail("checkpoint file '{}' is missing; a checkpoint directory holds {}, {} and {}",
         path.string(), kModelFile, kOptimizerFile, kStateFile);
  }
  const io::SafetensorsFile file(path);
  std::set<std::string_view> expected;
  for (const TensorTarget& target : targets) {
    expected.insert(target.name);
    const io::TensorInfo* info = file.find(target.name);
    if (info == nullptr) {
      fail(
          "checkpoint file '{}' has no tensor '{}' ({} tensors, this model needs {}); the "
          "checkpoint is of a different model configuration",
          path.string(), target.name, file.tensors().size(), targets.size());
    }
    if (info->dtype != file_dtype(target.out.dtype())) {
      fail(
          "checkpoint file '{}': tensor '{}' is {}, this run keeps its weights in {} "
          "(weight_dtype); resume with the weight_dtype the checkpoint was written with",
          path.string(), target.name, io::st_dtype_name(info->dtype),
          io::st_dtype_name(file_dtype(target.out.dtype())));
    }
    if (info->shape != target.shape) {
      fail(
          "checkpoint file '{}': tensor '{}' has shape {}, this model expects {}; the checkpoint "
          "is of a different model configuration",
          path.string(), target.name, io::shape_string(info->shape),
          io::shape_string(target.shape));
    }
  }
  for (const io::TensorInfo& info : file.tensors()) {
    if (!expected.contains(info.name)) {
      fail(
          "checkpoint file '{}' holds tensor '{}', which this model does not have; the "
          "checkpoint is of a different model configuration",
          path.string(), info.name);
    }
  }
  for (const TensorTarget& target : targets) {
    file.read_into(target.name, target.out);
    if (const std::optional<int64_t> bad = first_non_finite(target.out)) {
      fail(
          "checkpoint file '{}': tensor '{}' holds a non-finite value (NaN or Inf) at element "
          "{}; the file is damaged or the run had diverged when it was saved",
          path.string(), target.name, *bad);
    }
  }
}

Shape shape_of(const std::vector<int64_t>& dims) {
  return dims.size() == 1 ? Shape{dims[0]} : Shape{dims[0], dims[1]};
}

std::string moment_name(std::string_view moment, const WeightSpec& spec) {
  return fmt::format("{}.{}", moment, spec.name);
}

}  // namespace

fs::path checkpoint_directory(const fs::path& run_dir, int64_t step) {
  return run_dir / kCheckpointsDir / std::to_string(step);
}

void write_checkpoint(const fs::path& run_dir, const CheckpointState& state,
                      const std::vector<WeightSpec>& specs, std::span<const float> params,
                      std::span<const float> adam_m, std::span<const float> adam_v) {
  const auto view = [](std::span<const float> v) {
    return TensorView::of(v.data(), static_cast<int64_t>(v.size()));
  };
  write_checkpoint(run_dir, state, specs, view(params), view(adam_m), view(adam_v));
}

void write_checkpoint(const fs::path& run_dir, const CheckpointState& state,
                      const std::vector<WeightSpec>& specs, TensorView params, TensorView adam_m,
                      TensorView adam_v) {
  check_layout(specs, params.numel(), "parameter");
  check_layout(specs, adam_m.numel(), "adam_m");
  check_layout(specs, adam_v.numel(), "adam_v");
  MAXCTX_CHECK(adam_m.dtype() == params.dtype() && adam_v.dtype() == params.dtype(),
               "parameters and moments of one dtype");
  const io::StDType dtype = file_dtype(params.dtype());
  MAXCTX_CHECK(state.step >= 0 && state.data_position >= 0, "step {} and data position {}",
               state.step, state.data_position);

  const fs::path root = run_dir / kCheckpointsDir;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail("cannot create checkpoint directory '{}': {}", root.string(), ec.message());
  remove_temporaries(root);
  const fs::path final_dir = checkpoint_directory(run_dir, state.step);
  const fs::path tmp_dir =
      root / fmt::format("{}{}{}", state.step, kTemporaryMarker, static_cast<int64_t>(::getpid()));
  fs::create_directory(tmp_dir, ec);
  if (ec) fail("cannot create '{}': {}", tmp_dir.string(), ec.message());

  try {
    std::vector<io::TensorToWrite> weights;
    std::vector<io::TensorToWrite> moments;
    for (const WeightSpec& spec : specs) {
      const auto slice = [&](TensorView flat) {
        const TensorView part = flat.elements(spec.offset, spec.numel());
        return std::span<const std::byte>(static_cast<const std::byte*>(part.raw()), part.bytes());
      };
      weights.push_back({spec.name, dtype, global_shape(spec), slice(params)});
      moments.push_back({moment_name("adam_m", spec), dtype, global_shape(spec), slice(adam_m)});
      moments.push_back({moment_name("adam_v", spec), dtype, global_shape(spec), slice(adam_v)});
    }
    // "pt" is what transformers' safetensors loader asks for.
    const std::map<std::string, std::string> metadata = {{"format", "pt"}};
    io::write_safetensors(tmp_dir / kModelFile, weights, metadata);
    inject_fault(FaultKind::kWrite, state.step);  // tests: an I/O error mid-checkpoint
    io::write_safetensors(tmp_dir / kOptimizerFile, moments, metadata);
    const nlohmann::ordered_json state_json = {{"format", kCheckpointFormat},
                                               {"step", state.step},
                                               {"data_position", state.data_position},
                                               {"config", state.config_text}};
    write_synced_text(tmp_dir / kStateFile, state_json.dump(2) + "\n");
    sync_path(tmp_dir, /*directory=*/true);
    install_directory(tmp_dir, final_dir);
    sync_path(root, /*directory=*/true);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
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

CheckpointState read_checkpoint(const fs::path& run_dir, int64_t step,
                                const std::vector<WeightSpec>& specs, std::span<float> params,
                                std::span<float> adam_m, std::span<float> adam_v) {
  const auto view = [](std::span<float> v) {
    return TensorView::of(v.data(), static_cast<int64_t>(v.size()));
  };
  return read_checkpoint(run_dir, step, specs, view(params), view(adam_m), view(adam_v));
}

CheckpointState read_checkpoint(const fs::path& run_dir, int64_t step,
                                const std::vector<WeightSpec>& specs, TensorView params,
                                TensorView adam_m, TensorView adam_v) {
  check_layout(specs, params.numel(), "parameter");
  check_layout(specs, adam_m.numel(), "adam_m");
  check_layout(specs, adam_v.numel(), "adam_v");
  const fs::path dir = checkpoint_directory(run_dir, step);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const std::vector<int64_t> steps = complete_steps(run_dir);
    fail("checkpoint step {} does not exist: no directory '{}'; complete checkpoints in '{}': {}",
         step, dir.string(), (run_dir / kCheckpointsDir).string(),
         steps.empty() ? std::string("none") : fmt::format("{}", fmt::join(steps, ", ")));
  }
  const fs::path state_path = dir / kStateFile;
  if (!fs::is_regular_file(state_path, ec)) {
    fail("checkpoint file '{}' is missing; a checkpoint directory holds {}, {} and {}",
         state_path.string(), kModelFile, kOptimizerFile, kStateFile);
  }
  const CheckpointState state = parse_state(state_path, step);

  std::vector<TensorTarget> weights;
  std::vector<TensorTarget> moments;
  for (const WeightSpec& spec : specs) {
    const auto slice = [&](TensorView flat) {
      return flat.elements(spec.offset, spec.numel()).reshaped(shape_of(global_shape(spec)));
    };
    weights.push_back({spec.name, global_shape(spec), slice(params)});
    moments.push_back({moment_name("adam_m", spec), global_shape(spec), slice(adam_m)});
    moments.push_back({moment_name("adam_v", spec), global_shape(spec), slice(adam_v)});
  }
  read_tensors(dir / kModelFile, weights);
  read_tensors(dir / kOptimizerFile, moments);
  return state;
}

}  // namespace maxctx::train
