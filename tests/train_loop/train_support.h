// Shared by the training-loop tests: configs for a tiny model, a packed token file, a temporary
// run directory, and the norm-relative error. The file and directory helpers are collective over
// Communicator::world(): rank 0 writes, every rank waits for it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/rng.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/train/token_file.h"

namespace maxctx::train::testing {

namespace fs = std::filesystem;

inline const std::string kBaseConfig = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";

// A directory every rank agrees on (rank 0's pid), removed by rank 0 at the end.
class SharedTempDir {
 public:
  SharedTempDir() {
    const Communicator world = Communicator::world();
    int32_t pid = static_cast<int32_t>(::getpid());
    world.broadcast<int32_t>({&pid, 1}, 0);
    path_ = fs::temp_directory_path() / ("maxctx_train_" + std::to_string(pid));
    world.barrier();
    if (world.rank() == 0) fs::create_directories(path_);
    world.barrier();
  }
  ~SharedTempDir() {
    const Communicator world = Communicator::world();
    world.barrier();
    if (world.rank() == 0) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Documents of 5..40 tokens (ids 3..255), separated by EOS 2: packed rows of 48 hold 2-6
// documents, so segment masks and position restarts are everywhere.
inline std::string write_packed_token_file(const fs::path& dir) {
  const std::string path = (dir / "tokens.bin").string();
  const Communicator world = Communicator::world();
  if (world.rank() == 0) {
    std::vector<int32_t> tokens;
    for (int doc = 0; doc < 60; ++doc) {
      const int length = 5 + static_cast<int>(rng::u32_at(9, 1, doc) % 36);
      for (int i = 0; i < length; ++i) {
        tokens.push_back(3 + static_cast<int32_t>(rng::u32_at(9, 2, doc * 64 + i) % 253));
      }
      tokens.push_back(2);
    }
    write_token_file(path, tokens, 2, TokenWidth::kUInt16);
  }
  world.barrier();
  return path;
}

// The tiny model and a short, deterministic schedule; the caller adds mesh and batch keys.
inline std::vector<std::string> tiny_training_overrides(const fs::path& dir,
                                                        const std::string& run_name) {
  return {"model_name=maxctx-tiny",
          "max_target_length=48",
          "steps=3",
          "learning_rate=1e-4",
          "learning_rate_schedule_steps=3",
          "warmup_steps_fraction=0",
          "enable_checkpointing=false",
          "log_period=1",
          "base_output_directory=" + dir.string(),
          "run_name=" + run_name};
}

// `base` with the keys of `extra` replaced (a key may be given only once on a command line).
inline std::vector<std::string> with_overrides(std::vector<std::string> base,
                                               const std::vector<std::string>& extra) {
  for (const std::string& e : extra) {
    const std::string key = e.substr(0, e.find('=') + 1);
    std::erase_if(base, [&](const std::string& o) { return o.rfind(key, 0) == 0; });
    base.push_back(e);
  }
  return base;
}

// A mesh a test runs on: its name, the ranks it needs and its ici_* overrides.
struct MeshCase {
  std::string name;
  int ranks;
  std::vector<std::string> mesh;
};

// The mesh a loaded config asks for, over Communicator::world().
inline Mesh mesh_of(const Config& config) {
  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  return Mesh(spec);
}

inline double norm_relative_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return scale == 0.0 ? diff : diff / scale;
}

}  // namespace maxctx::train::testing
