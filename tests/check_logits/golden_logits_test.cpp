// The golden-logits file (MaxText's JSONL) and the comparison: bit-exact write/read, the
// committed fixture read back against the torch reference it came from, KL and allclose on
// cases computed by hand, and one error per malformed file naming the line.
#include "maxctx/io/golden_logits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"

namespace maxctx::io {
namespace {

const std::string kTinyLlama = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_llama";

TEST(GoldenLogits, FixtureMatchesTheTorchReference) {
  const std::vector<GoldenPrompt> golden = read_golden_logits(kTinyLlama + "/golden_logits.jsonl");
  ASSERT_EQ(golden.size(), 2u);
  EXPECT_EQ(golden[0].seq(), 10);
  EXPECT_EQ(golden[1].seq(), 12);
  EXPECT_EQ(golden[0].vocab, 96);
  EXPECT_EQ(golden[0].prompt.rfind("token ids: ", 0), 0u);
  // Prompt 0 is row 0's first document of reference.safetensors: same tokens, same logits.
  const SafetensorsFile reference(kTinyLlama + "/reference.safetensors");
  const std::vector<int32_t> ids = reference.read_i32("input_ids", {2, 24});
  const std::vector<float> logits = reference.read_f32("logits", {2, 24, 96});
  EXPECT_EQ(golden[0].tokens, std::vector<int32_t>(ids.begin(), ids.begin() + 10));
  EXPECT_EQ(golden[0].logits, std::vector<float>(logits.begin(), logits.begin() + 10 * 96));
}

TEST(GoldenLogits, WriteReadIsBitExact) {
  TempDir dir;
  GoldenPrompt a{"hello \"quoted\"\n", {1, 2, 3}, 4, {}};
  for (int i = 0; i < 12; ++i)
    a.logits.push_back(std::ldexp(1.0f + i / 7.0f, i - 6) * (i % 2 ? -1 : 1));
  a.logits[5] = 1e-38f;
  a.logits[6] = 3.4e38f;
  const GoldenPrompt b{"", {7}, 4, {0.1f, 0.2f, 0.3f, -0.0f}};
  const std::vector<GoldenPrompt> written = {a, b};
  write_golden_logits(dir.path() / "g.jsonl", written);
  const std::vector<GoldenPrompt> read = read_golden_logits(dir.path() / "g.jsonl");
  ASSERT_EQ(read.size(), 2u);
  for (size_t p = 0; p < 2; ++p) {
    EXPECT_EQ(read[p].prompt, written[p].prompt);
    EXPECT_EQ(read[p].tokens, written[p].tokens);
    EXPECT_EQ(read[p].vocab, written[p].vocab);
    ASSERT_EQ(read[p].logits.size(), written[p].logits.size());
    EXPECT_EQ(0, std::memcmp(read[p].logits.data(), written[p].logits.data(),
                             written[p].logits.size() * sizeof(float)));
  }
}

TEST(GoldenLogits, KlDivergenceByHand) {
  // p = softmax(0, ln 3) = (1/4, 3/4), q = (1/2, 1/2).
  const std::vector<float> golden = {0.0f, std::log(3.0f)};
  const std::vector<float> model = {5.0f, 5.0f};
  const double expected = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
  EXPECT_NEAR(kl_divergence_of_logits(golden, model), expected, 1e-7);
  // Softmax ignores a constant shift: no divergence, while every logit differs by 10.
  const std::vector<float> shifted = {10.0f, std::log(3.0f) + 10.0f};
  EXPECT_LT(kl_divergence_of_logits(golden, shifted), 1e-12);
  const LogitComparison c = compare_logits(golden, shifted, 1, 2, 0.1, 0.0);
  EXPECT_EQ(c.num_outside, 2);
  EXPECT_NEAR(c.max_abs_diff, 10.0, 1e-5);
}

TEST(GoldenLogits, AllcloseCombinesAtolAndRtol) {
  // Bounds atol + rtol·|golden| = 0.05 + 0.1·|g|: 0.15 for g = 1, 0.25 for g = -2.
  const std::vector<float> golden = {1.0f, -2.0f, 0.5f, 0.0f};
  const std::vector<float> model = {1.1f, -2.3f, 0.5f, 0.04f};
  const LogitComparison c = compare_logits(golden, model, 2, 2, 0.05, 0.1);
  EXPECT_EQ(c.tokens, 2);
  EXPECT_EQ(c.logits, 4);
  EXPECT_EQ(c.num_outside, 1);
  EXPECT_EQ(c.worst_token, 0);
  EXPECT_EQ(c.worst_vocab, 1);
  EXPECT_FLOAT_EQ(c.worst_model, -2.3f);
  EXPECT_NEAR(c.max_abs_diff, 0.3, 1e-6);
  EXPECT_EQ(compare_logits(golden, model, 2, 2, 0.05, 0.2).num_outside, 0);
  const std::vector<float> nan_model = {1.0f, NAN, 0.5f, 0.0f};
  const LogitComparison n = compare_logits(golden, nan_model, 2, 2, 1.0, 1.0);
  EXPECT_EQ(n.num_outside, 1);
  EXPECT_TRUE(std::isinf(n.max_kl));
}

void expect_read_error(const std::string& text, const std::string& fragment) {
  TempDir dir;
  std::ofstream(dir.path() / "g.jsonl") << text;
  try {
    read_golden_logits(dir.path() / "g.jsonl");
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GoldenLogits, MalformedFilesNameTheLine) {
  const std::string good = R"({"prompt": "a", "tokens": [1, 2], "logits": [[0, 1], [2, 3]]})";
  expect_read_error("", "holds no prompts");
  expect_read_error(good + "\n{not json", "g.jsonl:2: not a JSON object");
  expect_read_error(good + "\n\n" + R"({"tokens": [1]})", "g.jsonl:3: needs \"logits\"");
  expect_read_error(R"({"tokens": [1, 2], "logits": [[0, 1]]})", "1 rows of logits for 2 tokens");
  expect_read_error(R"({"tokens": [1, 2], "logits": [[0, 1], [2]]})", "row 1 has 1 values");
  expect_read_error(R"({"tokens": [1, -2], "logits": [[0], [1]]})", "token -2 is not a token id");
  expect_read_error(R"({"tokens": [1], "logits": [["x"]]})", "holds \"x\", not a number");
  expect_read_error(R"({"tokens": [], "logits": []})", "\"tokens\" is empty");
  expect_read_error(R"([1, 2])", "must be a JSON object");
}

TEST(GoldenLogits, TopKLinesRead) {
  TempDir dir;
  std::ofstream(dir.path() / "k.jsonl")
      << R"({"tokens": [5, 6, 7], "top_k_rows": [2], "top_k_ids": [[4, 1]],)"
      << R"( "top_k_logits": [[3.5, 3.25]]})"
      << "\n"
      << R"({"tokens": [5], "top_k_ids": [[0]], "top_k_logits": [[1]], "logits": [[1, 0]]})"
      << "\n";
  const std::vector<GoldenPrompt> g = read_golden_logits(dir.path() / "k.jsonl");
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(g[0].logits.empty());
  EXPECT_EQ(g[0].top_k, 2);
  EXPECT_EQ(g[0].top_k_rows, (std::vector<int64_t>{2}));
  EXPECT_EQ(g[0].top_k_ids, (std::vector<int32_t>{4, 1}));
  EXPECT_EQ(g[0].top_k_logits, (std::vector<float>{3.5f, 3.25f}));
  EXPECT_EQ(g[1].top_k_rows, (std::vector<int64_t>{0}));  // absent: every row
  EXPECT_EQ(g[1].vocab, 2);

  const std::string ids = R"({"tokens": [1, 2], "top_k_rows": [1], )";
  expect_read_error(ids + R"("top_k_ids": [[1, 2]]})", "need \"top_k_ids\" and \"top_k_logits\"");
  expect_read_error(ids + R"("top_k_ids": [[1, 2]], "top_k_logits": [[2, 3]]})",
                    "top-k row 0 is not highest first (3 after 2)");
  expect_read_error(ids + R"("top_k_ids": [[1, 1]], "top_k_logits": [[3, 2]]})",
                    "holds id 1 twice");
  expect_read_error(ids + R"("top_k_ids": [[1]], "top_k_logits": [[3, 2]]})",
                    "two lists of the same, non-zero length");
  expect_read_error(R"({"tokens": [1, 2], "top_k_rows": [2], "top_k_ids": [[1]], )"
                    R"("top_k_logits": [[1]]})",
                    "top_k_rows holds 2; rows are ascending indices below the 2 tokens");
  expect_read_error(R"({"tokens": [1, 2], "top_k_ids": [[1]], "top_k_logits": [[1]]})",
                    "1 rows of top_k_ids and 1 of top_k_logits for 2 rows");
  expect_read_error(ids + R"("top_k_ids": [[1]], "top_k_logits": [[1e999]]})", "");
}

// Top-k goldens: ids in order, values within atol + rtol·|golden|, ties within tolerance may swap
// (inside the k, or the k-th with one just outside), an intruder above the k-th logit fails.
TEST(GoldenLogits, TopKComparison) {
  GoldenPrompt g{"", {3, 4}, 0, {}};
  g.top_k = 3;
  g.top_k_rows = {1};
  g.top_k_ids = {2, 0, 5};
  g.top_k_logits = {9.0f, 7.0f, 6.0f};
  const auto compare = [&](std::vector<float> row1) {
    std::vector<float> model(6, -100.0f);  // row 0 is not compared
    model.insert(model.end(), row1.begin(), row1.end());
    return compare_top_k(g, model, 6, 1e-3, 0.0);
  };
  //                                  id: 0      1     2     3     4     5
  EXPECT_EQ(compare({7.0f, 1.0f, 9.0f, 2.0f, 3.0f, 6.0f}).num_failed, 0);
  const TopKComparison close = compare({7.0005f, 1.0f, 8.9995f, 2.0f, 5.9995f, 6.0f});
  EXPECT_EQ(close.num_failed, 0);  // id 4 ties the 3rd golden logit within tolerance
  EXPECT_NEAR(close.max_abs_diff, 5e-4, 1e-6);
  const TopKComparison off = compare({7.01f, 1.0f, 9.0f, 2.0f, 3.0f, 6.0f});
  EXPECT_EQ(off.num_failed, 1);
  EXPECT_NE(off.first_failure.find("row 1: golden id 0 (rank 2) has logit 7.01 in the model, 7 in"),
            std::string::npos)
      << off.first_failure;
  const TopKComparison intruder = compare({7.0f, 6.5f, 9.0f, 2.0f, 3.0f, 6.0f});
  EXPECT_EQ(intruder.num_failed, 1);
  EXPECT_NE(intruder.first_failure.find("id 1 has logit 6.5 in the model, above the golden's k-th"),
            std::string::npos)
      << intruder.first_failure;
  EXPECT_NE(intruder.first_failure.find("(model top 3: [2, 0, 1], golden: [2, 0, 5])"),
            std::string::npos)
      << intruder.first_failure;
  // Two golden logits within tolerance of each other may come out in either order.
  g.top_k_logits = {9.0f, 7.0f, 6.9995f};
  EXPECT_EQ(compare({6.9996f, 1.0f, 9.0f, 2.0f, 3.0f, 6.9999f}).num_failed, 0);
  EXPECT_EQ(compare({std::nanf(""), 1.0f, 9.0f, 2.0f, 3.0f, 6.9999f}).num_failed, 1);
}

}  // namespace
}  // namespace maxctx::io
