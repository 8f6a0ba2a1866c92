// The inference engine: prefill, decode steps and generation over the `context_autoregressive`
// axis (DESIGN.md §6), on this rank's shard of the KV cache, and the `expert` axis.
//
// Slots are MaxText's decode slots: a fixed batch of requests decoded together, each with its
// own prompt length and positions. With decode sharding `sequence` every rank computes every
// slot's token (weights replicated over the axis) and holds 1/ca of every slot's cache; with
// `batch` rank r decodes slots [r·slots/ca, (r+1)·slots/ca) on whole caches. Either way every
// rank ends each call with the same (slots, V) logits, so sampling (seeded per slot and
// position) picks the same tokens everywhere and matches the single-device run.
//
// The expert axis (MaxText's inference rules: decode_batch and the prefill batch sharded over
// expert, the experts `exp` over expert × context_autoregressive) splits the slots into
// `expert` groups: the ranks of expert coordinate g own slots [g·slots/expert, (g+1)·slots/expert)
// and run them over their context_autoregressive ranks as above; the groups' logits are
// all-gathered over expert at the end of every call. A mixture of experts' experts split over
// all expert × ca ranks (parallel::inference_expert_group), rows exchanged by all_to_all; for a
// dense model the axis is a pure slot split.
//
// The prompt layout of a prefill: every prompt is padded to S = round_up(longest, 2·ca) tokens
// (padding is segment 0, invisible to real tokens) and split as training splits a sequence
// (parallel/load_balance.h): with load_balance rank r holds chunks r and 2·ca−1−r of 2·ca, so
// the causal work is even; without it, S = round_up(longest, ca) and rank r holds columns
// [r·S/ca, (r+1)·S/ca). The cache keeps each row's position, so decode does not care which.
// A sequence of a slot never exceeds max_target_length tokens, prompt included.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/infer/sampler.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/model/inference.h"
#include "maxctx/model/quantized_checkpoint.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::infer {

using parallel::decode_owner;
using parallel::DecodeSharding;

struct InferenceSettings {
  int64_t max_prefill_length = 64;  // max_prefill_predict_length: the longest prompt
  int64_t max_target_length = 128;  // the longest sequence, prompt + generated
  DecodeSharding decode = DecodeSharding::kSequence;
  bool quantize_kvcache = false;
  bool int8_weights = false;  // quantization=int8
  // context_parallel_load_balance: the prefill's dual chunk swap (rank r holds chunks r and
  // 2·ca−1−r of 2·ca), so every rank does the same causal work, as in training.
  bool load_balance = true;
  // use_chunked_prefill: tokens per rank of one prefill pass (whole slots, at least one), or 0:
  // every slot at once. The workspace then holds a pass's rows (workspace_rows).
  int64_t prefill_chunk_size = 0;
  SamplingParams sampling;
  int32_t eos_id = -1;  // generation stops at it; -1: only at max_target_length
  int64_t slots = 1;    // decode slots, all ranks together
};

// The settings of a resolved config on `mesh`, checked: context must be 1 (inference shards over
// context_autoregressive and expert), the other axes 1, max_target_length >
// max_prefill_predict_length, ca divides max_prefill_predict_length, expert divides the slots
// (and, for batch decode, ca divides a group's slots). Slots = per_device_batch_size × devices
// (MaxText's global batch). maxctx::Error on every rank alike.
InferenceSettings inference_settings_from(const Config& config, const Mesh& mesh);
// The same for `ca` context_autoregressive and `expert` expert ranks, the mesh checked by the
// caller (`maxctx plan`).
InferenceSettings inference_settings_from(const Config& config, int64_t ca, int64_t expert = 1);
// The mesh checks alone (also used by callers that build settings by hand).
void check_inference_mesh(const Mesh& mesh);

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // per slot: generated ids (EOS included if drawn)
  // With keep_logits: per step the (slots, V) logits the tokens were drawn from, step 0 from
  // the prefill; a finished slot's rows are still filled (and unused).
  std::vector<std::vector<float>> logits;
};

class InferenceEngine {
 public:
  // `weights`: this rank's parameters in inference_weight_specs layout (infer/model_source.h:
  // every weight, but only this rank's experts when they split over expert × ca), in
  // model.weight_dtype, as load_inference_model returns them; the engine keeps it. The f32
  // vector form takes the whole model (llama_weight_specs layout) and keeps this rank's part,
  // converted to weight_dtype. Collective only in that every rank must build one.
  // With settings.int8_weights the engine keeps no float copy of a projection: `weights` is
  // then the int8 layout's float tensors (model::int8_layout) and `int8` the projections' codes
  // and scales, as load_inference_model returns them; given the whole layout and no `int8`, it
  // quantizes the projections and drops their floats itself. Once packed for the int8 matmul
  // the codes are released too: what stays is the packed int8 and the float tensors.
  InferenceEngine(const kernels::Kernels& kernels, const InferenceSettings& settings,
                  const model::LlamaConfig& model, Tensor weights, const Mesh& mesh,
                  model::Int8Parameters int8 = {});
  InferenceEngine(const kernels::Kernels& kernels, const InferenceSettings& settings,
                  const model::LlamaConfig& model, const std::vector<float>& weights,
                  const Mesh& mesh);
  ~InferenceEngine();

  // One prefill pass: slots [first_slot, + slots) of an expert group, prompt positions
  // [first_position, + tokens) of each, every rank holding tokens / ca of them (training's
  // split of those positions, context_shard_indices) at cache rows from first_position / ca.
  struct PrefillPass {
    int64_t first_slot = 0, slots = 0, first_position = 0, tokens = 0;
    int64_t rows(int64_t ca) const { return slots * (tokens / ca); }  // on each rank
  };
  // The passes of a prefill whose prompts are padded to S_pad tokens. Unchunked: one pass of
  // every slot's whole prompt. Chunked (use_chunked_prefill) with a prompt that fits a pass: as
  // many whole slots per pass as the workspace holds (at least one). A longer prompt: one slot
  // at a time, in passes of prefill_chunk_size tokens per rank (rounded down to the split's
  // multiple, the last pass the rest), each attending to the cache rows of the passes before
  // it (MaxText's chunked prefill).
  static std::vector<PrefillPass> prefill_passes(const InferenceSettings& settings, int64_t ca,
                                                 int64_t expert, int64_t S_pad);
  // The rows of the forward workspace: the largest prefill pass's on this rank (a prompt of
  // max_prefill_predict_length tokens), or the local slots of a decode step (of this rank's
  // expert group, one of `expert`).
  static int64_t workspace_rows(const InferenceSettings& settings, int64_t ca, int64_t expert = 1);
  // The staging the prefill attention holds after a prefill of max_prefill_predict_length
  // tokens (PrefillAttention::staging_bytes of the largest pass).
  static int64_t prefill_staging_bytes(const InferenceSettings& settings,
                                       const model::LlamaConfig& model, int64_t ca,
                                       int64_t expert = 1);
  // What this rank's prefill attention holds now (PrefillAttention::held_bytes).
  int64_t prefill_staging_held() const { return plans_.prefill->held_bytes(); }
  // The pages of the forward's workspace the forwards so far wrote, measured
  // (model::inference_workspace_resident_bytes).
  int64_t workspace_resident_bytes() const {
    return model::inference_workspace_resident_bytes(kernels_, ws_);
  }

  // Resets every slot and prefills slot b with prompts[b] (prompts.size() == slots, each 1 ..
  // max_prefill_length tokens and shorter than max_target_length). Returns every slot's
  // last-prompt-token logits (slots, V). With local_logits, also every row this rank computed,
  // pass by pass (prefill_passes; unchunked: (group slots, S/ca, V) in its token layout, its
  // expert group's slots): the rows llama_forward gives for the same tokens; local_positions
  // then receives each row's prompt position.
  const std::vector<float>& prefill(const std::vector<std::vector<int32_t>>& prompts,
                                    std::vector<float>* local_logits = nullptr,
                                    std::vector<int32_t>* local_positions = nullptr);

  // Feeds tokens[b] to every slot with active[b] at its next position; returns (slots, V).
  const std::vector<float>& decode_step(std::span<const int32_t> tokens,
                                        std::span<const uint8_t> active);

  // What the decode steps so far read back from a device backend and waited for, with the
  // number of steps (Kernels::transfer_counts; nullopt on the cpu, whose memory is the host's).
  struct DecodeTransfers {
    int64_t steps = 0;
    kernels::TransferCounts counts;
  };
  std::optional<DecodeTransfers> decode_transfers() const { return decode_transfers_; }

  // Prefill, then sample and decode until every slot drew eos_id or reached max_target_length.
  GenerateResult generate(const std::vector<std::vector<int32_t>>& prompts,
                          bool keep_logits = false);

  // As after a prefill of `context` tokens in every slot, with random K/V (a decode step's cost
  // does not depend on the values): for microbenchmarks of long contexts.
  void fill_synthetic(int64_t context);

  const InferenceSettings& settings() const { return settings_; }
  const model::LlamaConfig& model_config() const { return model_; }
  const model::InferenceWeights& weights() const { return *inference_weights_; }
  // What this rank's weights occupy: the float weights it keeps plus the packed int8 ones.
  int64_t resident_weight_bytes() const {
    return static_cast<int64_t>(flat_.view().bytes()) + inference_weights_->int8_copy_bytes();
  }
  const parallel::KvCache& cache() const { return *plans_.cache; }
  // Whether decode steps split the MLP and head rows over the axis (sequence sharding, ca > 1).
  bool decode_row_split() const { return plans_.row_split != nullptr; }
  // Over how many ranks a mixture of experts' experts are split (1: every rank runs them all).
  int64_t expert_ranks() const { return plans_.experts ? plans_.experts->ranks() : 1; }
  int64_t slots() const { return settings_.slots; }
  int64_t ca() const { return ca_.size(); }
  int64_t expert() const { return expert_.size(); }  // slot groups
  const Communicator& axis() const { return ca_; }   // context_autoregressive
  // Every rank of the engine (expert × context_autoregressive): a timing's barrier and maximum.
  const Communicator& devices() const { return devices_; }
  // Tokens in slot b's sequence so far (the next position to feed).
  int64_t length(int64_t slot) const { return length_[slot]; }

 private:
  // flat_ (this rank's whole layout, `specs`) becomes layout's float tensors, int8_ the
  // projections' codes and scales.
  void compact_to_int8(const std::vector<model::WeightSpec>& specs,
                       const model::Int8Layout& layout);
  // This rank's expert group's slots: [first_group_slot(), + group_slots()).
  int64_t group_slots() const { return settings_.slots / expert_.size(); }
  int64_t first_group_slot() const { return expert_.rank() * group_slots(); }
  int64_t local_slots() const;
  int64_t first_local_slot() const;
  // Where this expert group's (group slots, V) logits are assembled: logits_ itself with one
  // group (no copy), else group_logits_.
  std::vector<float>& group_logits();
  // logits_ (slots, V) from every group's, all-gathered over expert (nothing with one group).
  void gather_groups();

  const kernels::Kernels& kernels_;
  InferenceSettings settings_;
  model::LlamaConfig model_;
  Tensor flat_;  // (total_numel) the parameters (int8: those not quantized), weight_dtype
  model::LlamaWeights llama_weights_;
  model::Int8Parameters int8_;  // the projections' codes and scales until packed, then empty
  const Communicator& ca_;
  const Communicator& expert_;
  const Communicator& devices_;
  std::optional<DecodeTransfers> decode_transfers_;
  parallel::InferenceParallelPlans plans_;  // cache, prefill/decode attention, row split
  std::unique_ptr<model::InferenceWeights> inference_weights_;
  model::InferenceWorkspace ws_;
  Sampler sampler_;

  std::vector<int64_t> length_;      // (slots) tokens in each sequence
  std::vector<float> logits_;        // (slots, V)
  std::vector<float> group_logits_;  // (group slots, V): this expert group's, when expert > 1
  std::vector<float> row_logits_;    // (rows, V) logits of this rank's rows
  // Token batches of this rank: (B, S) tokens, positions, segment ids, and the logit rows.
  std::vector<int32_t> tokens_, positions_, segments_;
  kernels::DeviceIndices ids_device_;  // tokens_ | positions_ | segments_ in the backend's memory
  // A TokenBatch of (batch, seq) over tokens_, positions_ and segments_, uploaded once.
  model::TokenBatch upload_batch(int64_t batch, int64_t seq);
  // tokens_, positions_, segments_ of a prefill pass on this rank, and its logit rows: every
  // row (all_rows) or each slot's last prompt token.
  void build_pass(const std::vector<std::vector<int32_t>>& prompts, const PrefillPass& pass,
                  bool all_rows);
  std::vector<int64_t> logit_rows_, logit_slots_;
};

}  // namespace maxctx::infer
