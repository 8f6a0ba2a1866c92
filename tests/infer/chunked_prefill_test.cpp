// Issue #31: a prompt longer than prefill_chunk_size is prefilled in chunks of tokens (MaxText's
// chunked prefill: each chunk attends to the cache rows the earlier chunks wrote and to itself),
// on context_autoregressive = the number of ranks (ctest: 1, 2, 4), where the earlier rows are
// spread over every rank's shard. Against the same engine prefilling each prompt in one pass:
// the prefill's logits and every decode step's after it (teacher-forced with the one-pass run's
// greedy tokens, so each step reads every cache row the chunks wrote) agree within 1e-5 (fp32)
// and the int8 bound of inference_test.cpp (an int8 KV cache: later chunks read the earlier
// ones quantized, as decode does). Prompt lengths (45, 29, 38) are not multiples of the chunk,
// and the workspace holds a chunk's rows, not the prompt's.
#include <gtest/gtest.h>

#include <string>

#include "infer/infer_test_util.h"

namespace maxctx::infer {
namespace {

using testing::ca_mesh;

constexpr int64_t kPrefill = 48;  // a multiple of 2·ca for ca = 1, 2, 4
constexpr int64_t kChunk = 5;     // tokens per rank of a pass (rounded down to the split)

struct ChunkCase {
  const char* name;
  bool mixtral = false;  // the tiny_mixtral fixture: experts and vocabulary split over ca
  bool int8 = false;     // int8 weights and KV cache
  bool load_balance = true;
  bool bf16 = false;
  double tolerance() const { return int8 || bf16 ? 5e-2 : 1e-5; }
};

class ChunkedPrefill : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(ChunkedPrefill, LogitsEqualOnePassPrefill) {
  const ChunkCase& c = GetParam();
  model::LlamaConfig mc = c.mixtral
                              ? model::llama_config_from_hf(
                                    std::string(testing::mixtral_fixture_dir()) + "/config.json")
                              : testing::tiny_config();
  const std::vector<float> weights =
      c.mixtral ? testing::fixture_weights(mc, testing::mixtral_fixture_dir())
                : testing::init_weights(mc, 7, 4.0f);
  if (c.bf16) mc.dtype = mc.weight_dtype = DType::kBF16;
  InferenceSettings s;
  s.max_prefill_length = kPrefill;
  s.max_target_length = kPrefill + 8;
  s.quantize_kvcache = c.int8;
  s.int8_weights = c.int8;
  s.load_balance = c.load_balance;
  s.slots = 3;
  InferenceSettings chunked = s;
  chunked.prefill_chunk_size = kChunk;
  const Mesh mesh = ca_mesh(Communicator::world());
  const int64_t ca = Communicator::world().size();
  const kernels::Kernels& k = kernels::backend(Device::kCpu);
  InferenceEngine one_pass(k, s, mc, weights, mesh);
  InferenceEngine engine(k, chunked, mc, weights, mesh);

  // The workspace holds one pass: at most the chunk's rows (the split's multiple at least),
  // where one pass holds every slot's whole prompt.
  const int64_t split = c.load_balance && ca > 1 ? 2 * ca : ca;
  const int64_t pass_tokens = std::max(split, ca * kChunk / split * split);
  EXPECT_EQ(InferenceEngine::workspace_rows(chunked, ca), pass_tokens / ca);
  EXPECT_LE(InferenceEngine::workspace_rows(chunked, ca), std::max<int64_t>(kChunk, split / ca));
  EXPECT_EQ(InferenceEngine::workspace_rows(s, ca), s.slots * kPrefill / ca);
  const auto passes = InferenceEngine::prefill_passes(chunked, ca, 1, kPrefill);
  EXPECT_EQ(static_cast<int64_t>(passes.size()),
            s.slots * ((kPrefill + pass_tokens - 1) / pass_tokens));

  const std::vector<std::vector<int32_t>> prompts = {
      testing::make_prompts(1, 45, mc.vocab_size, 5)[0],
      testing::make_prompts(1, 29, mc.vocab_size, 6)[0],
      testing::make_prompts(1, 38, mc.vocab_size, 7)[0]};
  const testing::ForcedLogitErrors worst = testing::forced_logit_errors(one_pass, engine, prompts);
  EXPECT_LE(worst.prefill, c.tolerance()) << c.name << ": prefill logits";
  EXPECT_LE(worst.decode, c.tolerance()) << c.name << ": decode logits after the chunked prefill";
  EXPECT_GT(worst.steps, 4u);  // the prefill and decode steps
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ChunkedPrefill,
    ::testing::Values(ChunkCase{"fp32"}, ChunkCase{"fp32_contiguous", false, false, false},
                      ChunkCase{"int8", false, true}, ChunkCase{"bf16", false, false, true, true},
                      ChunkCase{"mixtral", true}, ChunkCase{"mixtral_int8", true, true}),
    [](const auto& test) { return std::string(test.param.name); });

}  // namespace
}  // namespace maxctx::infer
