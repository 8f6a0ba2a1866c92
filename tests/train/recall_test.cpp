// The recall task: the documented layout, only answers scored, every answer recoverable from
// the context (and only from it), determinism, parameter errors, the accuracy helpers.
#include "maxctx/train/recall.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "maxctx/core/arg_max.h"
#include "maxctx/core/check.h"

namespace maxctx {
namespace {

TEST(Recall, DefaultParametersFollowTheVocabularyAndLength) {
  const RecallParams p = default_recall_params(32000, 2048);
  EXPECT_EQ(p.keys, (TokenRange{3, 10668}));
  EXPECT_EQ(p.values, (TokenRange{10668, 21333}));
  EXPECT_EQ(p.filler, (TokenRange{21333, 32000}));
  EXPECT_EQ(p.num_pairs, 64);
  EXPECT_EQ(p.num_queries, 64);
  EXPECT_EQ(default_recall_params(16, 20).num_pairs, 1);
  EXPECT_EQ(default_recall_params(16, 4096).num_pairs, 4);  // only 4 keys in [3, 7)
  EXPECT_THROW(default_recall_params(5, 64), Error);
  EXPECT_THROW(default_recall_params(64, 5), Error);
}

TEST(Recall, RowsHaveTheDocumentedLayout) {
  const RecallParams p = default_recall_params(256, 512);  // 84 keys, P = Q = 16
  ASSERT_EQ(p.num_pairs, 16);
  const RecallSource source(p, 3);
  const int64_t seq = p.seq_len;
  const int64_t context = seq - 3 * p.num_queries;
  const int64_t slot = context / p.num_pairs;
  const Batch batch = source.read(0, 8);
  for (int64_t r = 0; r < batch.rows; ++r) {
    const int32_t* tokens = batch.tokens.data() + r * seq;
    const int32_t* targets = batch.targets.data() + r * seq;
    const int32_t* scored = batch.target_segment_ids.data() + r * seq;
    // Context: filler, and exactly one "PAIR key value" inside each slot.
    std::vector<int32_t> pair_key_at_slot;
    for (int64_t c = 0; c < context; ++c) {
      if (tokens[c] == p.pair_marker) {
        ASSERT_EQ(c / slot, static_cast<int64_t>(pair_key_at_slot.size())) << "row " << r;
        ASSERT_LE(c + 2, (c / slot + 1) * slot - 1) << "a pair stays inside its slot";
        ASSERT_TRUE(p.keys.begin <= tokens[c + 1] && tokens[c + 1] < p.keys.end);
        ASSERT_TRUE(p.values.begin <= tokens[c + 2] && tokens[c + 2] < p.values.end);
        pair_key_at_slot.push_back(tokens[c + 1]);
        c += 2;
      } else {
        ASSERT_TRUE(p.filler.begin <= tokens[c] && tokens[c] < p.filler.end) << c;
      }
    }
    ASSERT_EQ(static_cast<int64_t>(pair_key_at_slot.size()), p.num_pairs);
    std::vector<int32_t> asked;
    for (int64_t c = 0; c < seq; ++c) {
      EXPECT_EQ(batch.positions[r * seq + c], c);
      EXPECT_EQ(batch.segment_ids[r * seq + c], 1);
      if (c + 1 < seq) {
        EXPECT_EQ(targets[c], tokens[c + 1]);
      }
      if (scored[c] == 0) continue;
      // A scored target: the key of a query at the end, whose value sits after that key's pair.
      ASSERT_GE(c, context);
      ASSERT_EQ((c - context) % 3, 1);
      ASSERT_EQ(tokens[c - 1], p.query_marker);
      int found = 0;
      for (int64_t k = 0; k < context; ++k) {
        if (tokens[k] == p.pair_marker && tokens[k + 1] == tokens[c]) {
          ++found;
          EXPECT_EQ(targets[c], tokens[k + 2]);
        }
      }
      EXPECT_EQ(found, 1) << "keys are distinct within a row";
      asked.push_back(tokens[c]);
    }
    EXPECT_EQ(static_cast<int64_t>(asked.size()), p.num_queries);
    std::sort(asked.begin(), asked.end());
    EXPECT_EQ(std::unique(asked.begin(), asked.end()), asked.end()) << "each pair asked once";
  }
  EXPECT_EQ(total_weights(batch), 8 * p.num_queries);
}

TEST(Recall, QueriesReachAcrossTheWholeContext) {
  // Over many rows the asked pairs come from every slot, the first included.
  const RecallParams p = default_recall_params(256, 256);  // P = Q = 8
  const RecallSource source(p, 1);
  const Batch batch = source.read(0, 64);
  const int64_t context = p.seq_len - 3 * p.num_queries;
  const int64_t slot = context / p.num_pairs;
  std::vector<int> asked_slot(static_cast<size_t>(p.num_pairs), 0);
  for (int64_t r = 0; r < batch.rows; ++r) {
    const int32_t* tokens = batch.tokens.data() + r * p.seq_len;
    const int32_t* scored = batch.target_segment_ids.data() + r * p.seq_len;
    for (int64_t c = context; c < p.seq_len; ++c) {
      if (scored[c] == 0) continue;
      for (int64_t k = 0; k < context; ++k) {
        if (tokens[k] == p.pair_marker && tokens[k + 1] == tokens[c]) ++asked_slot[k / slot];
      }
    }
  }
  for (int count : asked_slot) EXPECT_EQ(count, 64);  // Q = P: every pair asked in every row
}

TEST(Recall, MatchesTheHeaderExample) {
  RecallParams p = default_recall_params(16, 32);
  p.num_pairs = 2;
  p.num_queries = 2;
  const Batch row = RecallSource(p, 0).read(0, 1);
  // Printed as in the header: "|" where the queries start, each scored answer in brackets.
  const int64_t context = 32 - 3 * p.num_queries;
  std::ostringstream text;
  for (int64_t c = 0; c < 32; ++c) {
    const bool answer = c > 0 && row.target_segment_ids[c - 1] != 0;
    text << (c > 0 ? " " : "") << (c == context ? "|" : "") << (answer ? "[" : "") << row.tokens[c]
         << (answer ? "]" : "");
  }
  EXPECT_EQ(text.str(),
            "13 13 12 11 12 11 1 5 8 15 11 14 11 11 13 12 1 3 9 15 11 15 11 14 14 14 "
            "|2 5 [8] 2 3 [9]");
}

TEST(Recall, DeterministicAndRandomAccess) {
  const RecallParams p = default_recall_params(128, 96);
  const Batch all = RecallSource(p, 5).read(0, 6);
  EXPECT_EQ(RecallSource(p, 5).read(0, 6), all);
  const Batch row4 = RecallSource(p, 5).read(4, 1);
  EXPECT_TRUE(std::equal(row4.tokens.begin(), row4.tokens.end(), all.tokens.begin() + 4 * 96));
  EXPECT_NE(RecallSource(p, 6).read(0, 6).tokens, all.tokens);
}

TEST(Recall, InvalidParametersAreErrors) {
  RecallParams p = default_recall_params(64, 64);
  p.num_pairs = 100;
  EXPECT_THROW(RecallSource(p, 0), Error);
  p = default_recall_params(64, 64);
  p.num_queries = p.num_pairs + 1;
  EXPECT_THROW(RecallSource(p, 0), Error);
  p = default_recall_params(64, 64);
  p.num_pairs = 12;
  p.num_queries = 12;  // 72 tokens > 64
  EXPECT_THROW(RecallSource(p, 0), Error);
  p = default_recall_params(64, 64);
  p.filler = {p.values.end - 1, 64};  // overlaps the values
  EXPECT_THROW(RecallSource(p, 0), Error);
  p = default_recall_params(64, 64);
  p.query_marker = p.keys.begin;
  EXPECT_THROW(RecallSource(p, 0), Error);
}

TEST(Recall, AccuracyCountsOnlyScoredTargets) {
  const RecallParams p = default_recall_params(64, 64);  // P = Q = 2
  const Batch batch = RecallSource(p, 2).read(0, 4);
  const int64_t scored = total_weights(batch);
  ASSERT_EQ(scored, 8);

  // Right everywhere scored, wrong everywhere else: 100%.
  std::vector<int32_t> predictions(batch.size());
  for (int64_t i = 0; i < batch.size(); ++i) {
    predictions[i] = batch.target_segment_ids[i] != 0 ? batch.targets[i] : batch.targets[i] + 1;
  }
  ScoredAccuracy accuracy = scored_accuracy(predictions, batch);
  EXPECT_EQ(accuracy.correct, 8);
  EXPECT_EQ(accuracy.scored, 8);
  EXPECT_DOUBLE_EQ(accuracy.fraction(), 1.0);

  // Logits whose arg max is the target on every other scored token: 50%.
  const int64_t vocab = p.vocab_size;
  std::vector<float> logits(static_cast<size_t>(batch.size() * vocab), 0.0f);
  int seen = 0;
  for (int64_t i = 0; i < batch.size(); ++i) {
    const bool right = batch.target_segment_ids[i] != 0 && seen++ % 2 == 0;
    const int32_t winner = right ? batch.targets[i] : (batch.targets[i] + 7) % vocab;
    logits[i * vocab + winner] = 3.0f;
  }
  accuracy = scored_accuracy_from_logits(logits, vocab, batch);
  EXPECT_EQ(accuracy.correct, 4);
  EXPECT_EQ(accuracy.scored, 8);
  EXPECT_DOUBLE_EQ(accuracy.fraction(), 0.5);
  // Ties go to the first maximum (jnp.argmax): all-zero logits predict token 0.
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(scored_accuracy_from_logits(logits, vocab, batch).correct, 0);
  EXPECT_DOUBLE_EQ(ScoredAccuracy{}.fraction(), 0.0);
}

}  // namespace
}  // namespace maxctx

// The accuracy's arg max against std::max_element, its plain reference: random rows with ties,
// signed zeros, infinities and NaNs in every position.
TEST(Recall, FirstArgMaxIsMaxElements) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {0.0f, -0.0f, nan, inf, -inf, 1.0f, -1.0f};
  std::mt19937 random(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = 1 + random() % 40;
    std::vector<float> row(n);
    for (float& v : row) {
      // Few distinct values, so that ties are common.
      v = random() % 4 == 0 ? specials[random() % specials.size()]
                            : static_cast<float>(static_cast<int>(random() % 5) - 2);
    }
    const auto expected = std::max_element(row.begin(), row.end()) - row.begin();
    ASSERT_EQ(maxctx::first_arg_max(row), expected) << "trial " << trial;
  }
  std::vector<float> wide(8192);
  for (float& v : wide) v = static_cast<float>(random() % 100000) / 7.0f;
  EXPECT_EQ(maxctx::first_arg_max(wide), std::max_element(wide.begin(), wide.end()) - wide.begin());
}
