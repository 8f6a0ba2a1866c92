// A profiled 2-rank context-parallel training run (profiler=xplane): its trace.json, read with a
// JSON parser, has both ranks' spans, every collective the step makes, valid nesting on each
// thread and monotone timestamps; the summary accounts for it; and tracing changes no number
// (the losses equal an unprofiled run's bit for bit).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/io/trace_summary.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/train/trainer.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

struct Span {
  std::string name, category, detail;
  double begin = 0, end = 0;
  int pid = 0, tid = 0;
};

fs::path shared_dir() {
  const Communicator world = Communicator::world();
  int32_t pid = static_cast<int32_t>(::getpid());
  world.broadcast<int32_t>({&pid, 1}, 0);
  return fs::temp_directory_path() / ("maxctx_profiled_" + std::to_string(pid));
}

std::vector<double> train(const fs::path& dir, const std::string& run, const std::string& strategy,
                          bool profile) {
  std::vector<std::string> keys = {"model_name=maxctx-tiny",
                                   "max_target_length=128",
                                   "steps=4",
                                   "enable_checkpointing=false",
                                   "ici_fsdp_parallelism=1",
                                   "ici_context_parallelism=2",
                                   "per_device_batch_size=1",
                                   "dataset_type=synthetic",
                                   "log_period=10",
                                   "remat_policy=full",
                                   "base_output_directory=" + dir.string(),
                                   "run_name=" + run,
                                   "context_parallel_strategy=" + strategy};
  if (profile) {
    keys.insert(keys.end(),
                {"profiler=xplane", "skip_first_n_steps_for_profiler=1", "profiler_steps=2"});
  }
  const Config config = load_config(std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml", keys, 2);
  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  const Mesh mesh(spec);
  train::Trainer trainer(config, mesh, kernels::backend(Device::kCpu));
  trainer.run();
  std::vector<double> losses;
  for (const auto& r : trainer.history()) losses.push_back(r.loss);
  return losses;
}

// Passes over each layer's attention in a step under remat_policy=full: forward,
// the backward's recomputation of the forward, backward.
constexpr int kAttentionPasses = 3;

std::vector<Span> read_spans(const fs::path& file) {
  std::ifstream in(file);
  const nlohmann::json doc = nlohmann::json::parse(in);  // throws on malformed JSON
  std::vector<Span> spans;
  double last_ts[2] = {-1, -1};
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    Span s;
    s.name = e.at("name");
    s.category = e.at("cat");
    s.begin = e.at("ts");
    s.end = s.begin + e.at("dur").get<double>();
    s.pid = e.at("pid");
    s.tid = e.at("tid");
    if (e.at("args").contains("detail")) s.detail = e["args"]["detail"];
    EXPECT_GE(e.at("dur").get<double>(), 0.0) << s.name;
    EXPECT_GE(s.begin, 0.0) << s.name;
    // Each rank's events are written in start order.
    EXPECT_GE(s.begin, last_ts[s.pid]) << s.name << " on rank " << s.pid;
    last_ts[s.pid] = s.begin;
    spans.push_back(s);
  }
  return spans;
}

// On one thread spans nest: each lies inside, or entirely after, the ones open before it.
void expect_nested(std::vector<Span> spans) {
  std::vector<const Span*> open;
  for (const Span& s : spans) {
    while (!open.empty() && open.back()->end <= s.begin) open.pop_back();
    if (!open.empty()) {
      EXPECT_LE(s.end, open.back()->end + 0.002)  // the writer rounds to nanoseconds
          << s.name << " [" << s.begin << ", " << s.end << ") crosses " << open.back()->name << " ["
          << open.back()->begin << ", " << open.back()->end << ")";
    }
    open.push_back(&s);
  }
}

class ProfiledRun : public ::testing::TestWithParam<std::string> {};

TEST_P(ProfiledRun, TraceHoldsEveryRankAndCollective) {
  const std::string strategy = GetParam();
  const fs::path dir = shared_dir();
  const std::vector<double> plain = train(dir, "plain_" + strategy, strategy, false);
  const std::vector<double> profiled = train(dir, "profiled_" + strategy, strategy, true);
  EXPECT_EQ(plain, profiled);  // exact: tracing only observes
  const Communicator world = Communicator::world();
  if (world.rank() == 0) {
    const fs::path trace = dir / ("profiled_" + strategy) / "trace.json";
    ASSERT_TRUE(fs::exists(trace));
    EXPECT_FALSE(fs::exists(dir / ("plain_" + strategy) / "trace.json"));
    const std::vector<Span> spans = read_spans(trace);
    for (int rank = 0; rank < 2; ++rank) {
      std::map<std::string, int> count;
      std::set<std::string> comm_axes;
      std::vector<Span> main_track;
      for (const Span& s : spans) {
        if (s.pid != rank) continue;
        ++count[s.name];
        if (!s.detail.empty()) ++count[s.name + "@" + s.detail];
        if (s.category == "comm" && !s.detail.empty()) comm_axes.insert(s.detail);
        if (s.tid == 0) main_track.push_back(s);
      }
      SCOPED_TRACE("rank " + std::to_string(rank));
      EXPECT_EQ(count["step"], 2);  // steps 1 and 2
      EXPECT_EQ(count["optimizer"], 2);
      EXPECT_EQ(count["next_batch"], 2);
      EXPECT_EQ(count["adamw_update"], 2);
      // maxctx-tiny's layers, forward and backward, each step.
      EXPECT_EQ(count["layer_forward"], count["layer_backward"]);
      EXPECT_GT(count["layer_forward"], 0);
      EXPECT_EQ(count["attention_forward"] % count["layer_forward"], 0);
      EXPECT_GT(count["matmul_forward"], 0);
      EXPECT_GT(count["rmsnorm_backward"], 0);
      // Over the context group every step all-reduces the loss weights, the loss sums and the
      // gradient norm's pieces: at least 3 a step.
      EXPECT_TRUE(comm_axes.count("context")) << "no collective over the context axis";
      EXPECT_GE(count["all_reduce@context"], 2 * 3);
      if (strategy == "ring") {
        // Forward and backward pass K/V chunks: isend/irecv in flight, a wait on each, and the
        // backward's dK/dV send_recv.
        EXPECT_GT(count["isend"], 0);
        EXPECT_EQ(count["isend"], count["irecv"]);
        EXPECT_GT(count["wait"], 0);
        EXPECT_GT(count["send_recv"], 0);
        // cp = 2 ring steps in every layer's forward, its recomputation in the backward
        // (remat_policy=full, the default, recomputes attention) and its backward.
        EXPECT_EQ(count["ring_step"], 2 * kAttentionPasses * count["layer_forward"]);
        for (const Span& s : spans) {
          if (s.pid == rank && (s.name == "isend" || s.name == "irecv")) {
            EXPECT_EQ(s.tid, 1);
            EXPECT_EQ(s.detail, "context");
          }
        }
      } else {
        // K/V gathered in forward, in the recomputed forward and in backward; dK/dV
        // reduce-scattered. The weights are sharded over fsdp × context (context alone here):
        // each step gathers the embedding, every layer and the head for the forward, the head
        // and the layers again for the backward, and reduce-scatters every unit's gradients.
        const int steps = 2, layers = count["layer_forward"] / steps;
        const int weight_gathers = steps * ((layers + 2) + 1 + layers);
        const int gradient_scatters = steps * (layers + 2);
        EXPECT_EQ(count["all_gather@context"],
                  2 * kAttentionPasses * count["layer_forward"] + weight_gathers);
        EXPECT_EQ(count["reduce_scatter@context"], count["layer_forward"] + gradient_scatters);
      }
      expect_nested(main_track);
    }
    const std::vector<RankTime> summary = summarize_trace(trace);
    ASSERT_EQ(summary.size(), 2u);
    for (const RankTime& r : summary) {
      EXPECT_EQ(r.steps, 2);
      EXPECT_GT(r.compute_ms, 0.0);
      EXPECT_GT(r.comm_ms, 0.0);
      EXPECT_LE(r.exposed_comm_ms, r.comm_ms + 1e-9);
      EXPECT_GE(r.idle_ms, -1e-6);
      EXPECT_LE(r.compute_ms + r.exposed_comm_ms, r.window_ms + 1e-6);
      EXPECT_FALSE(r.top_ops.empty());
    }
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Strategies, ProfiledRun, ::testing::Values("ring", "all_gather"));

}  // namespace
}  // namespace maxctx
