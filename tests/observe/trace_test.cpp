// Trace spans (core/trace.h), their Chrome JSON (mesh/trace_file.h), the traced op table
// (kernels/traced_kernels.h) and the summary's interval arithmetic (io/trace_summary.h).
#include "maxctx/core/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/io/trace_summary.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/traced_kernels.h"
#include "maxctx/mesh/trace_file.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

TEST(Trace, RecordsNothingWhenOff) {
  trace::start(trace::now_ns());
  trace::stop();
  { const trace::Span span("off", trace::Category::kCompute); }
  EXPECT_TRUE(trace::collect().empty());
}

TEST(Trace, NestedSpansComeOutParentFirstWithTheirArguments) {
  trace::start(trace::now_ns());
  {
    const trace::Span outer("outer", trace::Category::kStep);
    const trace::Span inner("inner", trace::Category::kComm, "context", 4096);
  }
  trace::Span early("finished early", trace::Category::kIo);
  early.finish();
  trace::stop();
  const std::vector<trace::Event> events = trace::collect();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_STREQ(events[0].name, "outer");
  EXPECT_STREQ(events[1].name, "inner");
  EXPECT_STREQ(events[1].detail, "context");
  EXPECT_EQ(events[1].value, 4096);
  EXPECT_LE(events[0].begin_ns, events[1].begin_ns);
  EXPECT_GE(events[0].end_ns, events[1].end_ns);
  EXPECT_STREQ(events[2].name, "finished early");
  EXPECT_EQ(std::string(trace::numbered("layer", 3)), "layer 3");
  EXPECT_EQ(trace::numbered("layer", 3), trace::numbered("layer", 3));  // interned once
}

TEST(Trace, JsonIsAChromeTraceWithProcessAndThreadNames) {
  const int64_t origin = 1'000'000;
  std::vector<trace::Event> events = {{"attention_forward", nullptr, -1, origin + 2000,
                                       origin + 5000, trace::Category::kCompute, trace::kMainTrack},
                                      {"isend", "con\"text", 64, origin + 1000, origin + 6000,
                                       trace::Category::kComm, trace::kAsyncTrack}};
  const nlohmann::json doc =
      nlohmann::json::parse("{\"traceEvents\":[" + trace_events_json(events, 3, origin) + "]}");
  const auto& list = doc["traceEvents"];
  ASSERT_EQ(list.size(), 6u);  // 4 metadata records, 2 spans
  EXPECT_EQ(list[0]["args"]["name"], "rank 3");
  EXPECT_EQ(list[4]["name"], "attention_forward");
  EXPECT_EQ(list[4]["ph"], "X");
  EXPECT_EQ(list[4]["cat"], "compute");
  EXPECT_DOUBLE_EQ(list[4]["ts"].get<double>(), 2.0);  // microseconds from the origin
  EXPECT_DOUBLE_EQ(list[4]["dur"].get<double>(), 3.0);
  EXPECT_EQ(list[5]["pid"], 3);
  EXPECT_EQ(list[5]["tid"], trace::kAsyncTrack);
  EXPECT_EQ(list[5]["args"]["detail"], "con\"text");
  EXPECT_EQ(list[5]["args"]["bytes"], 64);
}

TEST(Trace, TracedKernelsGiveTheSameResultsAndASpanPerOp) {
  const kernels::Kernels& plain = kernels::backend(Device::kCpu);
  const kernels::Kernels& traced = kernels::traced(plain);
  EXPECT_EQ(&kernels::traced(plain), &traced);   // one wrapper per backend
  EXPECT_EQ(&kernels::traced(traced), &traced);  // never wrapped twice
  std::vector<float> in(4 * 8), weight(3 * 8), a(4 * 3), b(4 * 3);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.125f * static_cast<float>(i % 5);
  const Shape x_shape{4, 8}, w_shape{3, 8}, o_shape{4, 3};
  plain.matmul_forward(TensorView(a.data(), DType::kF32, o_shape),
                       TensorView(in.data(), DType::kF32, x_shape),
                       TensorView(weight.data(), DType::kF32, w_shape));
  trace::start(trace::now_ns());
  traced.matmul_forward(TensorView(b.data(), DType::kF32, o_shape),
                        TensorView(in.data(), DType::kF32, x_shape),
                        TensorView(weight.data(), DType::kF32, w_shape));
  double squares = 0.0;
  traced.sum_of_squares(&squares, TensorView::of(b.data(), 12));
  trace::stop();
  EXPECT_EQ(a, b);
  EXPECT_GT(squares, 0.0);
  const std::vector<trace::Event> events = trace::collect();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_STREQ(events[0].name, "matmul_forward");
  EXPECT_STREQ(events[1].name, "sum_of_squares");
  EXPECT_EQ(events[0].category, trace::Category::kCompute);
}

// A hand-made trace whose answer is known: a 10 ms step on rank 0 with compute 0-4 and 6-9 ms,
// a transfer in flight 2.5-7 ms (exposed 4-6 = 2 ms) and a wait 9-9.5 ms (exposed 0.5 ms).
TEST(TraceSummary, ExposedCommunicationIsCommOutsideCompute) {
  const fs::path file = fs::temp_directory_path() / "maxctx_trace_summary_test.json";
  {
    std::ofstream out(file);
    out << R"({"traceEvents":[
      {"name":"step","cat":"step","ph":"X","ts":0,"dur":10000,"pid":0,"tid":0},
      {"name":"attention_forward","cat":"compute","ph":"X","ts":0,"dur":4000,"pid":0,"tid":0},
      {"name":"matmul_forward","cat":"compute","ph":"X","ts":6000,"dur":3000,"pid":0,"tid":0},
      {"name":"isend","cat":"comm","ph":"X","ts":2500,"dur":4500,"pid":0,"tid":1},
      {"name":"wait","cat":"comm","ph":"X","ts":9000,"dur":500,"pid":0,"tid":0},
      {"name":"step","cat":"step","ph":"X","ts":0,"dur":10000,"pid":1,"tid":0},
      {"name":"attention_forward","cat":"compute","ph":"X","ts":0,"dur":8000,"pid":1,"tid":0}
    ]})";
  }
  const std::vector<RankTime> ranks = summarize_trace(file);
  fs::remove(file);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(ranks[0].window_ms, 10.0);
  EXPECT_DOUBLE_EQ(ranks[0].compute_ms, 7.0);
  EXPECT_DOUBLE_EQ(ranks[0].comm_ms, 5.0);
  EXPECT_DOUBLE_EQ(ranks[0].exposed_comm_ms, 2.5);
  EXPECT_DOUBLE_EQ(ranks[0].idle_ms, 0.5);  // 9.5-10 ms: nothing
  EXPECT_EQ(ranks[0].top_ops[0].name, "isend (in flight)");
  EXPECT_DOUBLE_EQ(ranks[1].idle_ms, 2.0);
  const std::string text = format_trace_summary(ranks);
  EXPECT_NE(text.find("compute imbalance: slowest rank / fastest = 1.143"), std::string::npos)
      << text;
}

TEST(TraceSummary, NotATraceIsOneClearError) {
  const fs::path file = fs::temp_directory_path() / "maxctx_not_a_trace.json";
  std::ofstream(file) << R"({"events": []})";
  try {
    summarize_trace(file);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no traceEvents array"), std::string::npos) << e.what();
  }
  fs::remove(file);
}

}  // namespace
}  // namespace maxctx
