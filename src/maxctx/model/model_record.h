// The model a checkpoint holds, as its state.json records it ("model": {...}): every field that
// defines the architecture and its numerics (dimensions, layers, heads, vocabulary, norm epsilon,
// RoPE with its scaling, tied embeddings, sliding window, experts). Precision (dtype,
// weight_dtype) and the MoE dispatch keys (sparse_matmul, capacity_factor) are choices of the
// run that reads it, not of the model, and are not recorded.
//
// One table of fields (model_record.cpp) writes the record, reads it back (each value checked)
// and compares two models, naming a difference by the record's field and the config keys that
// set it, so a command never runs a checkpoint under a model it was not trained as.
//
// Checkpoints written before the record existed have no "model": whoever reads one says so and
// uses the config's model, as before (the tensor shapes are still checked).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/model/llama_config.h"

namespace maxctx::model {

nlohmann::ordered_json model_record(const LlamaConfig& model);

// The model of a record (its precision and dispatch fields left at their defaults). An unknown or
// missing field, or a value of the wrong type or out of range, is a maxctx::Error naming `where`
// and the field.
LlamaConfig model_from_record(const nlohmann::json& record, std::string_view where);

// The first field in which `running` differs from `recorded`, as one sentence naming the field,
// both values and the config keys that set it; nullopt when they agree. `only_keys`: compare just
// the fields that one of these config keys sets (nullptr: every field).
std::optional<std::string> model_difference(const LlamaConfig& recorded, const LlamaConfig& running,
                                            const std::set<std::string>* only_keys = nullptr);

// The config keys that set model fields and are among `config`'s explicit keys (command line,
// M_<KEY>); with model_name set explicitly, every model key (a preset names the whole model).
std::set<std::string> explicit_model_keys(const Config& config);

// The RoPE keys (rope_max_timescale, rope_type, Llama 3.1's factors).
const std::set<std::string>& rope_keys();

// The model recorded in <checkpoint_dir>/state.json, or nullopt when the checkpoint has no
// state.json (a Hugging Face directory) or a state.json without a record (an older checkpoint).
std::optional<LlamaConfig> read_recorded_model(const std::filesystem::path& checkpoint_dir);

// The model a command that reads checkpoint `checkpoint_dir` (export, decode, check-logits) runs:
// the recorded one, the config's precision applied, after checking that every model key the
// user set explicitly agrees with it (else a maxctx::Error naming the field and both values).
// Without a record: the config's model keys, with a note that the checkpoint does not record its
// model.
LlamaConfig checkpoint_model(const Config& config, const std::filesystem::path& checkpoint_dir);

}  // namespace maxctx::model
