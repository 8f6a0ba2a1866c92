// The one declaration list of config keys: type, name, default, allowed values, help.
//
// Everything about a key is written here once and visited for the Config struct's fields,
// parsing YAML and key=value overrides, validation of allowed values, printing the resolved
// config and generating docs/config.md. Names and defaults follow MaxText's base.yml where the
// concept is the same, so MaxText command lines carry over; keys MaxText lacks are marked
// "maxctx:" in their help. Allowed values are "a|b|c" ("" means any value of the type).
//
// X(type, name, default, allowed, help)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace maxctx {

using IntList = std::vector<int64_t>;
using StringList = std::vector<std::string>;
// MaxText's logical_axis_rules: each logical tensor axis with the mesh axes it shards over
// ([[norm, fsdp], [embed, [fsdp, tensor]], [heads, null]]).
using AxisRules = std::vector<std::pair<std::string, StringList>>;

}  // namespace maxctx

// clang-format off
#define MAXCTX_MODEL_KEYS(X)                                                                     \
  X(std::string, model_name, "default", "",                                                     \
    "Model preset: loads configs/models/<model_name>.yml; 'default' keeps the base_* values")   \
  X(bool, override_model_config, false, "",                                                     \
    "Allow command-line overrides of keys the model file sets (MaxText's rule)")                \
  X(int64_t, global_parameter_scale, 1, "",                                                     \
    "Scales emb, heads, mlp and layers by this power of two (MaxText)")                         \
  X(int64_t, base_emb_dim, 2048, "", "Model width (d_model) before global_parameter_scale")    \
  X(int64_t, base_num_query_heads, 16, "", "Query heads")                                       \
  X(int64_t, base_num_kv_heads, 16, "", "Key/value heads (GQA when fewer than query heads)")    \
  X(int64_t, base_mlp_dim, 7168, "", "SwiGLU hidden width")                                     \
  X(int64_t, base_moe_mlp_dim, -1, "",                                                          \
    "An expert's SwiGLU width when num_experts > 1 (MaxText's presets set it); every maxctx "   \
    "MoE layer is an MoE layer, so it must equal base_mlp_dim (MaxText's rule); -1: unset")    \
  X(int64_t, base_num_decoder_layers, 16, "", "Decoder layers")                                 \
  X(int64_t, head_dim, 128, "", "Width of one attention head")                                  \
  X(int64_t, vocab_size, 32000, "", "Vocabulary size")                                          \
  X(std::string, decoder_block, "llama2", "llama2|mistral|mixtral",                             \
    "Decoder block family (mixtral: the MLP is a mixture of num_experts SwiGLU experts)")       \
  X(StringList, mlp_activations, (StringList{"silu", "linear"}), "",                            \
    "MLP activations; only [silu, linear] (SwiGLU) is supported")                               \
  X(double, normalization_layer_epsilon, 1e-5, "", "RMSNorm epsilon")                           \
  X(double, rope_max_timescale, 10000.0, "", "RoPE theta")                                      \
  X(double, rope_min_timescale, 1.0, "", "RoPE minimum timescale (1 for Llama)")                \
  X(std::string, rope_type, "default", "default|llama3.1",                                      \
    "RoPE frequencies: plain, or Llama 3.1's frequency scaling")                                \
  X(double, rope_scaling_factor, 8.0, "", "maxctx: Llama 3.1 RoPE scaling factor")              \
  X(double, rope_low_freq_factor, 1.0, "", "maxctx: Llama 3.1 RoPE low-frequency factor")       \
  X(double, rope_high_freq_factor, 4.0, "", "maxctx: Llama 3.1 RoPE high-frequency factor")     \
  X(int64_t, rope_original_max_position_embeddings, 8192, "",                                   \
    "maxctx: context length the Llama 3.1 RoPE scaling was designed around")                    \
  X(bool, logits_via_embedding, false, "",                                                      \
    "Tie the output head to the token embedding")                                               \
  X(int64_t, num_experts, 1, "", "Experts per MoE layer (1: dense MLP)")                        \
  X(int64_t, num_experts_per_tok, 1, "", "Experts each token is routed to")                     \
  X(double, load_balance_loss_weight, 0.0, "",                                                  \
    "Weight of the MoE load-balance loss added to the training loss (0: not computed)")         \
  X(bool, sparse_matmul, true, "",                                                              \
    "MoE dispatch: true sorts tokens by expert (one matmul per expert, no dropping); false is " \
    "dense dispatch with capacity_factor")                                                      \
  X(double, capacity_factor, -1.0, "",                                                          \
    "Dense MoE dispatch: expert capacity per sequence = int(max(ceil(S*k/num_experts)*cf, cf)) "\
    "tokens, later tokens dropped; <= 0: no dropping")                                          \
  X(bool, megablox, true, "",                                                                   \
    "MaxText's TPU grouped-matmul kernel for sparse_matmul; accepted, the CPU runs its own "     \
    "grouped matmul either way")                                                                \
  X(int64_t, sliding_window_size, 0, "",                                                        \
    "Sliding-window attention span in tokens (0: full causal)")                                 \
  X(std::string, attention, "autoselected", "autoselected|dot_product|flash|cudnn_flash_te",    \
    "Attention kernel (MaxText: XLA einsum, TPU splash, NVIDIA cuDNN); on CPU every choice "    \
    "runs the blocked flash kernel, whose results equal the plain reference's")                 \
  X(int64_t, sa_block_q, 512, "",                                                               \
    "MaxText's splash-attention tiles (sa_block_*), TPU only: validated (>= 1), no effect "     \
    "here; the CPU kernel's tiles are fixed at build time (kernels/cpu/attention.h)")           \
  X(int64_t, sa_block_kv, 512, "", "See sa_block_q")                                            \
  X(int64_t, sa_block_kv_compute, 512, "", "See sa_block_q")                                    \
  X(int64_t, sa_block_q_dkv, 512, "", "See sa_block_q")                                         \
  X(int64_t, sa_block_kv_dkv, 512, "", "See sa_block_q")                                        \
  X(int64_t, sa_block_kv_dkv_compute, 512, "", "See sa_block_q")                                \
  X(int64_t, sa_block_q_dq, 512, "", "See sa_block_q")                                          \
  X(int64_t, sa_block_kv_dq, 512, "", "See sa_block_q")                                         \
  X(bool, scan_layers, true, "",                                                                \
    "MaxText: jax.lax.scan over the layers (one compiled layer); no effect here, the layers "   \
    "always run as a loop over one layer function")                                             \
  X(AxisRules, logical_axis_rules, (AxisRules{}), "",                                            \
    "MaxText's logical-to-mesh sharding rules (its Llama 2 presets set [[norm, fsdp]]); "       \
    "checked as a list of [logical axis, mesh axes or null] pairs, no effect: parallel/ decides " \
    "every tensor's sharding")                                                                  \
  X(bool, enable_dropout, true, "",                                                             \
    "MaxText's dropout switch (its presets set false); accepted, no effect: maxctx has no "     \
    "dropout, as MaxText's default dropout_rate 0 has none")                                    \
  X(std::string, attention_type, "global", "global|local_sliding",                              \
    "global: causal; local_sliding: causal within sliding_window_size")                         \
  X(std::string, dtype, "float32", "float32|bfloat16",                                          \
    "Activations and matmul inputs (MaxText's default is bfloat16; maxctx keeps float32, its "   \
    "exact reference). bfloat16: bf16 matmul inputs with f32 accumulation; norms' statistics, "  \
    "softmax, RoPE angles, the loss and gradient reductions stay f32; inference keeps a bf16 "   \
    "KV cache unless quantize_kvcache")                                                          \
  X(std::string, weight_dtype, "float32", "float32|bfloat16",                                   \
    "Weights as stored: training's master weights and AdamW state, checkpoints, inference "     \
    "weights (bfloat16 halves their bytes)")                                                     \
  X(int64_t, init_weights_seed, 0, "", "Seed of the counter-based weight initialisation")

#define MAXCTX_TRAIN_KEYS(X)                                                                     \
  X(double, per_device_batch_size, 12.0, "",                                                    \
    "Sequences per device; fractional allowed when context > 1 (global batch must be whole)")   \
  X(int64_t, max_target_length, 2048, "", "Sequence length in tokens")                          \
  X(int64_t, max_prefill_predict_length, 64, "", "Longest prompt inference will prefill")      \
  X(int64_t, steps, 150001, "",                                                                 \
    "Training steps; -1 takes learning_rate_schedule_steps (MaxText)")                          \
  X(double, learning_rate, 3e-5, "", "Peak learning rate")                                      \
  X(int64_t, learning_rate_schedule_steps, -1, "",                                              \
    "Length of the warmup + cosine schedule; -1 takes steps")                                   \
  X(double, warmup_steps_fraction, 0.1, "", "Fraction of the schedule spent in linear warmup")  \
  X(double, cosine_learning_rate_final_fraction, 0.1, "",                                       \
    "Final learning rate as a fraction of the peak")                                            \
  X(std::string, remat_policy, "full", "",                                                      \
    "Activation recomputation (MaxText's names): full keeps each layer's input only, minimal "  \
    "its projections' outputs, none everything; also minimal_with_context, save_qkv_proj, "     \
    "save_dot_except_mlp, save_dot_with_context_except_mlp, save_dot_except_mlpwi, "             \
    "save_out_proj; custom: each tensor where its own key says (decoder_layer_input, "          \
    "query_proj, ..., mlpwo: remat, device or offload to host memory)")                         \
  X(std::string, decoder_layer_input, "device", "remat|device|offload",                           \
    "remat_policy=custom: where a decoder layer's input waits for the backward (device or "       \
    "offload to host memory)")                                                                    \
  X(std::string, query_proj, "remat", "remat|device|offload",                                     \
    "remat_policy=custom: the query projection: remat, device or offload (kept with "             \
    "key_proj and value_proj)")                                                                   \
  X(std::string, key_proj, "remat", "remat|device|offload",                                       \
    "remat_policy=custom: the key projection (kept with query_proj and value_proj)")              \
  X(std::string, value_proj, "remat", "remat|device|offload",                                     \
    "remat_policy=custom: the value projection (kept with query_proj and key_proj)")              \
  X(std::string, qkv_proj, "remat", "remat|device|offload",                                       \
    "remat_policy=custom: the fused q/k/v projection (q, k and v together)")                      \
  X(std::string, context, "remat", "remat|device|offload",                                        \
    "remat_policy=custom: the attention output and its log-sum-exp")                              \
  X(std::string, out_proj, "remat", "remat|device|offload",                                       \
    "remat_policy=custom: the stream after attention (the output projection's)")                  \
  X(std::string, mlpwi, "remat", "remat|device|offload",                                          \
    "remat_policy=custom: the MLP's input projections (gate and up together)")                    \
  X(std::string, mlpwi_0, "remat", "remat|device|offload",                                        \
    "remat_policy=custom: the MLP's gate projection (kept with mlpwi_1)")                         \
  X(std::string, mlpwi_1, "remat", "remat|device|offload",                                        \
    "remat_policy=custom: the MLP's up projection (kept with mlpwi_0)")                           \
  X(std::string, mlpwo, "remat", "remat|device|offload",                                          \
    "remat_policy=custom: the MLP's output (the next layer's input: as decoder_layer_input)")     \
  X(std::string, opt_type, "adamw", "adamw", "Optimizer")                                       \
  X(double, adam_b1, 0.9, "", "AdamW beta1")                                                    \
  X(double, adam_b2, 0.95, "", "AdamW beta2")                                                   \
  X(double, adam_eps, 1e-8, "", "AdamW epsilon (outside the square root)")                      \
  X(double, adam_eps_root, 0.0, "", "AdamW epsilon inside the square root")                     \
  X(double, adam_weight_decay, 0.1, "", "AdamW decoupled weight decay")                         \
  X(double, gradient_clipping_threshold, 1.0, "", "Global-norm gradient clipping (0: off)")    \
  X(int64_t, gradient_accumulation_steps, 1, "", "Micro-batches per optimizer step")            \
  X(int64_t, num_vocab_tiling, 1, "",                                                           \
    "Training's output head and loss in this many tiles of each device's batch x sequence "     \
    "tokens (MaxText's key: logits and their gradient are held for one tile at a time, never "  \
    "[tokens, vocab]); 1: untiled. per_device_batch_size x max_target_length must be a "        \
    "multiple of it")                                                                           \
  X(std::string, dataset_type, "synthetic", "synthetic|tokens|recall|hf",                       \
    "synthetic: random tokens; tokens: a binary token file; recall: long-range key-value "      \
    "recall; hf: local JSON Lines or text files (hf_path, hf_train_files), tokenized and packed")\
  X(std::string, dataset_path, "", "", "Token file for dataset_type=tokens")                    \
  X(std::string, hf_path, "", "|json|text",                                                     \
    "dataset_type=hf: the format of the local files (json: JSON Lines, one document per line "  \
    "in train_data_columns; text: one document per line)")                                      \
  X(std::string, hf_train_files, "", "",                                                        \
    "dataset_type=hf: training files: a path, a glob, or several separated by commas")          \
  X(std::string, hf_eval_files, "", "",                                                         \
    "dataset_type=hf: evaluation files (same forms as hf_train_files)")                         \
  X(StringList, train_data_columns, (StringList{"text"}), "",                                   \
    "dataset_type=hf with hf_path=json: the field holding each document's text")               \
  X(StringList, eval_data_columns, (StringList{"text"}), "",                                    \
    "dataset_type=hf with hf_path=json: the evaluation files' text field")                     \
  X(int64_t, eval_interval, -1, "",                                                             \
    "Evaluate every this many steps (<= 0: never); needs an eval dataset (hf_eval_files)")     \
  X(int64_t, eval_steps, -1, "",                                                                \
    "Batches per evaluation (<= 0: the whole eval set once)")                                   \
  X(double, eval_per_device_batch_size, 0.0, "",                                                \
    "Sequences per device in an eval batch (0: per_device_batch_size)")                         \
  X(bool, packing, true, "", "Pack documents into rows with segment ids and positions")        \
  X(int64_t, eos_id, 2, "", "End-of-sequence token id (document separator)")                    \
  X(int64_t, data_shuffle_seed, 0, "", "Seed of the data order and synthetic data")             \
  X(bool, enable_data_shuffling, true, "", "Shuffle the row order of token files every epoch")  \
  X(int64_t, recall_num_pairs, 0, "",                                                           \
    "maxctx: key-value pairs per recall row (0: max_target_length / 32)")                       \
  X(int64_t, recall_num_queries, 0, "",                                                         \
    "maxctx: queries per recall row (0: as many as pairs)")                                     \
  X(std::string, base_output_directory, "", "",                                                 \
    "Where runs are written (default: ./runs)")                                                 \
  X(std::string, run_name, "", "", "Run directory name under base_output_directory")           \
  X(bool, enable_checkpointing, true, "", "Write checkpoints")                                  \
  X(int64_t, checkpoint_period, 10000, "", "Steps between checkpoints")                         \
  X(int64_t, export_max_shard_size, 5000000000, "",                                             \
    "maxctx export: the largest safetensors file it writes, in bytes (transformers' "            \
    "max_shard_size, 5GB); a larger model is split over files listed by "                       \
    "model.safetensors.index.json")                                                             \
  X(bool, async_checkpointing, true, "",                                                        \
    "Write each rank's part of a checkpoint in the background from a staged copy while "        \
    "training goes on (committed once every rank's part is written)")                           \
  X(int64_t, max_num_checkpoints_to_keep, 0, "",                                                \
    "Keep only the newest this many checkpoints, deleting the oldest once a new one is "        \
    "complete (0: keep all, MaxText's None)")                                                   \
  X(std::string, load_parameters_path, "", "",                                                  \
    "Parameters to start from (fresh optimizer, step 0): a Hugging Face directory, a "          \
    "checkpoint directory <run>/checkpoints/<step>, or a llama.cpp Llama GGUF file (F32, F16, "  \
    "BF16, Q8_0, Q4_0, Q4_1; dequantized once into <base_output_directory>/gguf/, or for "     \
    "decode and bench-inference with quantization=int8 written as an int8 checkpoint whose "     \
    "Q8_0 projections keep their codes where each row's blocks share one scale; its byte-level "  \
    "tokenizer becoming tokenizer_path when none is given)")                                    \
  X(std::string, load_full_state_path, "", "",                                                  \
    "Full state to start from: a checkpoint directory <run>/checkpoints/<step> (parameters, "  \
    "AdamW moments, step and data position), or a run directory (its latest checkpoint)")      \
  X(int64_t, log_period, 100, "",                                                               \
    "Steps between step lines on the console (a terminal also gets a progress line), "          \
    "TensorBoard and metric flushes")                                                           \
  X(bool, enable_tensorboard, true, "",                                                         \
    "Write TensorBoard event files (MaxText's scalar names) in <run dir>/tensorboard")         \
  X(std::string, profiler, "", "|xplane|nsys",                                                  \
    "Trace a window of steps: xplane (and nsys, same here: no CUDA build yet) writes every "     \
    "rank's timeline to <run dir>/trace.json (Chrome trace-event JSON: Perfetto, "              \
    "chrome://tracing) and prints its summary; '' = off")                                       \
  X(int64_t, skip_first_n_steps_for_profiler, 1, "",                                            \
    "Steps of the run before the profiled window (warm-up)")                                    \
  X(int64_t, profiler_steps, 5, "", "Steps in the profiled window")                             \
  X(bool, upload_all_profiler_results, false, "",                                               \
    "MaxText uploads every host's profile; the trace here always holds every rank (accepted)")  \
  X(bool, enable_jax_profiler, false, "",                                                       \
    "MaxText's on-demand profiler server; maxctx has none: true is accepted with a warning "    \
    "that names profiler=xplane")

#define MAXCTX_PARALLEL_KEYS(X)                                                                  \
  X(std::string, hardware, "cpu", "cpu|gpu|gpu_multiprocess|tpu",                               \
    "What the run computes on: cpu; gpu (one CUDA GPU per rank, picked by the node-local rank "  \
    "modulo the GPUs it sees; weights, optimizer state, activations and KV cache in GPU "       \
    "memory); gpu_multiprocess is gpu here; tpu is refused (no TPU backend)")                  \
  X(int64_t, ici_data_parallelism, 1, "", "data axis within a node (-1: fill)")                 \
  X(int64_t, ici_fsdp_parallelism, -1, "", "fsdp axis within a node (-1: fill)")                \
  X(int64_t, ici_context_parallelism, 1, "", "context axis (training CP) within a node")       \
  X(int64_t, ici_context_autoregressive_parallelism, 1, "",                                     \
    "context_autoregressive axis (inference CP) within a node")                                 \
  X(int64_t, ici_tensor_parallelism, 1, "", "tensor axis within a node")                        \
  X(int64_t, ici_expert_parallelism, 1, "",                                                     \
    "expert axis within a node (MoE experts split over it, the batch too; inference: "          \
    "the decode slots, and the experts with context_autoregressive)")                           \
  X(int64_t, ici_autoregressive_parallelism, 1, "",                                             \
    "MaxText's autoregressive axis (heads, MLP, vocab and cache heads in inference); only "     \
    "1: maxctx has no such axis, use ici_context_autoregressive_parallelism")                   \
  X(int64_t, dcn_data_parallelism, -1, "", "data axis across nodes (-1: fill)")                 \
  X(int64_t, dcn_fsdp_parallelism, 1, "", "fsdp axis across nodes")                             \
  X(int64_t, dcn_context_parallelism, 1, "", "context axis across nodes")                       \
  X(int64_t, dcn_context_autoregressive_parallelism, 1, "",                                     \
    "context_autoregressive axis across nodes")                                                 \
  X(int64_t, dcn_tensor_parallelism, 1, "", "tensor axis across nodes")                         \
  X(int64_t, dcn_expert_parallelism, 1, "",                                                     \
    "expert axis across nodes (MoE experts split over it, the batch too; inference: "           \
    "the decode slots, and the experts with context_autoregressive)")                           \
  X(int64_t, debug_simulated_nodes, 0, "",                                                      \
    "maxctx: pretend the ranks sit on this many nodes (tests on one machine; 0: detect)")       \
  X(bool, context_parallel_load_balance, true, "",                                              \
    "Dual chunk swap: rank r holds chunks r and 2*cp-1-r of 2*cp")                              \
  X(std::string, context_parallel_strategy, "all_gather", "all_gather|ring",                    \
    "How K/V reach every query under context parallelism")                                      \
  X(double, collective_timeout_seconds, 1800.0, "",                                             \
    "maxctx: a rank waiting longer than this in one collective prints which (verb, mesh axes) "  \
    "and ends the job, instead of hanging on a stopped peer (0: wait forever). A rank working "  \
    "alone (rank 0 tokenizing, a checkpoint write) sends heartbeats while it makes progress, "  \
    "so this bounds a stall, not the work")                                                     \
  X(bool, allow_symlinked_run_directory, false, "",                                             \
    "maxctx: accept a run directory (or its checkpoints/, tensorboard/, tokenized/) that is a "  \
    "symlink; refused by default, since the run writes, truncates and deletes files there")

#define MAXCTX_INFERENCE_KEYS(X)                                                                 \
  X(std::string, context_autoregressive_decode, "sequence", "sequence|batch",                   \
    "maxctx: sequence: KV cache sharded along the sequence, partial attention merged; "         \
    "batch: decode slots split over the axis (MaxText)")                                        \
  X(std::string, quantization, "", "|int8", "Weight quantization ('' = none)")                  \
  X(bool, checkpoint_is_quantized, false, "",                                                   \
    "load_parameters_path holds int8 projections (maxctx export quantization=int8)")            \
  X(std::string, model_call_mode, "", "|inference",                                             \
    "MaxText: 'inference' builds the model for decoding; no effect here (the inference "        \
    "commands always run the inference model)")                                                 \
  X(std::string, compute_axis_order, "0,1,2,3", "0,1,2,3|0,2,1,3",                              \
    "MaxText's attention compute layout (batch, length, heads, head_dim; TPU tuning): "         \
    "accepted, no effect: the CPU kernels compute in (B, S, H, D)")                             \
  X(std::string, ar_cache_axis_order, "1,2,0,3", "",                                            \
    "MaxText's KV cache layout, a permutation of 0,1,2,3 over (batch, sequence, heads, "        \
    "head_dim) (TPU tuning): validated, no effect: the cache is (B, S, H, D)")                  \
  X(bool, quantize_kvcache, false, "", "Store the KV cache in int8")                            \
  X(bool, use_chunked_prefill, false, "",                                                       \
    "MaxText: prefill in chunks of prefill_chunk_size tokens. maxctx: prompts that fit run "    \
    "as many whole slots at a time as fit prefill_chunk_size tokens per rank; a longer one "    \
    "runs alone in chunks of prefill_chunk_size tokens per rank, each attending to the cache "  \
    "rows of the chunks before it on every rank, so the workspace holds about that many rows, " \
    "not slots x max_prefill_predict_length / ca (not with context_autoregressive_decode=batch " \
    "over ca > 1)")                                                                             \
  X(int64_t, prefill_chunk_size, 256, "",                                                       \
    "Tokens per rank of one prefill chunk (use_chunked_prefill)")                               \
  X(std::string, kv_quant_axis, "heads_and_dkv", "heads_and_dkv",                               \
    "KV cache quantization: one scale per token over heads x head_dim")                         \
  X(std::string, kv_quant_dtype, "int8", "int8", "KV cache quantized dtype")                    \
  X(std::string, decode_sampling_strategy, "greedy", "greedy|weighted|topk|nucleus",            \
    "Sampling: argmax, temperature, top-k or top-p")                                            \
  X(double, decode_sampling_temperature, 1.0, "", "Sampling temperature")                       \
  X(int64_t, decode_sampling_top_k, 0, "", "k for topk sampling")                               \
  X(double, decode_sampling_nucleus_p, -1.0, "", "p for nucleus sampling")                      \
  X(int64_t, decode_sampling_seed, 0, "",                                                       \
    "maxctx: seed of sampling; a token's draw depends only on it, its slot and its position")   \
  X(std::string, prompt, "I love to", "", "Prompt for decode")                                  \
  X(std::string, tokenizer_path, "", "", "SentencePiece model or Hugging Face tokenizer.json")  \
  X(bool, add_bos, true, "", "Prepend BOS when tokenizing")                                     \
  X(bool, add_eos, true, "", "Append EOS when tokenizing training text")                        \
  X(std::string, inference_microbenchmark_prefill_lengths, "64,128,256,512,1024", "",           \
    "Comma-separated prefill lengths for bench-inference")                                      \
  X(std::string, inference_microbenchmark_stages, "prefill,generate", "",                       \
    "Stages bench-inference runs")                                                              \
  X(int64_t, inference_microbenchmark_loop_iters, 10, "", "Timed iterations per stage")         \
  X(std::string, inference_microbenchmark_log_file_path, "", "",                                \
    "JSON results of bench-inference")                                                          \
  X(std::string, golden_logits_path, "", "", "maxctx: golden JSONL for check-logits")          \
  X(double, max_kl_div, 1e-4, "", "maxctx: check-logits bound on per-token KL(golden||model)")  \
  X(double, atol, 0.1, "", "maxctx: check-logits absolute logit tolerance")                     \
  X(double, rtol, 0.1, "", "maxctx: check-logits relative logit tolerance")

#define MAXCTX_CONFIG_SECTIONS(S)                                                                \
  S("Model", MAXCTX_MODEL_KEYS)                                                                 \
  S("Training and data", MAXCTX_TRAIN_KEYS)                                                     \
  S("Mesh and parallelism", MAXCTX_PARALLEL_KEYS)                                               \
  S("Inference", MAXCTX_INFERENCE_KEYS)

#define MAXCTX_CONFIG_KEYS(X) \
  MAXCTX_MODEL_KEYS(X) MAXCTX_TRAIN_KEYS(X) MAXCTX_PARALLEL_KEYS(X) MAXCTX_INFERENCE_KEYS(X)
// clang-format on
