// Activation recomputation (model/remat.h): every remat policy gives exactly the loss, logits and
// gradients of `none` (bit for bit: the backward recomputes with the same kernels on the same
// inputs), in fp32 and with bf16 activations, with tied embeddings and a sliding window too; the
// layers' saved bytes follow the documented formula; unknown and host-offloading names are
// refused with the supported list. Multi-rank meshes (context, tensor): tests/train_loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>

#include "maxctx/core/check.h"
#include "maxctx/kernels/emulated/emulated_gpu.h"
#include "model_test_util.h"

namespace maxctx::model {
namespace {

const char* const kPolicies[] = {"full",
                                 "minimal",
                                 "minimal_with_context",
                                 "save_dot_with_context_except_mlp",
                                 "save_dot_except_mlp",
                                 "save_qkv_proj",
                                 "save_out_proj"};

struct Gradients {
  double loss_sum = 0.0;
  std::vector<float> logits;  // d_logits after the backward (the forward's logits overwritten)
  std::vector<float> grads;
};

Gradients run(const LlamaConfig& c, const char* policy) {
  testing::LocalModel m(c);
  init_weights(m.specs, m.params.data(), 11);
  const testing::RandomBatch data(c.vocab_size);
  LlamaActivations acts =
      allocate_activations(*m.plan.kernels, c, data.B, data.S, 1, remat_policy_from(policy));
  Gradients out;
  out.loss_sum = llama_forward(c, m.weights, data.view(), m.plan, acts).loss_sum;
  // Two backwards accumulate: the second recomputes from what the first left in the scratch.
  for (int pass = 0; pass < 2; ++pass) {
    llama_forward(c, m.weights, data.view(), m.plan, acts);
    llama_backward(c, m.weights, m.gradients, data.view(), m.plan, acts, 0.05f);
  }
  out.logits.assign(acts.logits.data<float>(), acts.logits.data<float>() + acts.logits.numel());
  out.grads = m.grads;
  return out;
}

void expect_every_policy_equals_none(const LlamaConfig& c) {
  const Gradients none = run(c, "none");
  for (const char* policy : kPolicies) {
    const Gradients g = run(c, policy);
    EXPECT_EQ(g.loss_sum, none.loss_sum) << policy;
    ASSERT_EQ(g.grads.size(), none.grads.size());
    EXPECT_EQ(std::memcmp(g.grads.data(), none.grads.data(), g.grads.size() * sizeof(float)), 0)
        << policy << ": gradients differ from remat_policy=none";
    EXPECT_EQ(std::memcmp(g.logits.data(), none.logits.data(), g.logits.size() * sizeof(float)), 0)
        << policy;
  }
}

TEST(Remat, EveryPolicyGivesTheGradientsOfNoneBitForBit) {
  expect_every_policy_equals_none(testing::tiny_config());
}

TEST(Remat, Bf16ActivationsTiedEmbeddingsAndWindow) {
  LlamaConfig c = testing::tiny_config();
  c.dtype = DType::kBF16;
  c.tie_embeddings = true;
  c.sliding_window = 5;
  expect_every_policy_equals_none(c);
}

// The layers' saved bytes are what activation_bytes_per_token counts: the kept views once per
// layer, the rest once (the counts themselves against the docs: BytesPerTokenFollowTheDocsTable).
TEST(Remat, SavedLayerBytesFollowTheFormula) {
  const LlamaConfig c = testing::tiny_config();
  const int64_t B = 2, S = 12;
  int64_t none_bytes = 0;
  for (const char* policy : {"none", "full", "minimal", "save_qkv_proj"}) {
    const RematPolicy r = remat_policy_from(policy);
    const LlamaActivations acts =
        allocate_activations(kernels::backend(Device::kCpu), c, B, S, 1, r);
    int64_t stored = 0;
    for (const Tensor& t : acts.storage) stored += static_cast<int64_t>(t.view().bytes());
    const ActivationBytes formula = activation_bytes_per_token(c, r);
    EXPECT_EQ(stored, formula.layers_per_token * B * S) << policy;
    if (r.save_all) none_bytes = stored;
    if (!r.save_all) {
      EXPECT_LT(stored, none_bytes) << policy;
    }
  }
  // full keeps nothing of a layer but its input (in `residual`, counted with the stream): one
  // scratch set for all layers.
  const ActivationBytes none = activation_bytes_per_token(c, remat_policy_from("none"));
  const ActivationBytes full = activation_bytes_per_token(c, remat_policy_from("full"));
  EXPECT_EQ(full.layers_per_token * c.num_layers, none.layers_per_token);
  EXPECT_EQ(full.other_per_token, none.other_per_token);
}

// docs/architecture.md "Activation memory", written out again: the bytes per token of each group
// of a layer's activations and the policies that keep it (the rest is one scratch set), so that
// the list activations.cpp allocates from and counts with is held against the table, not itself.
int64_t docs_layers_per_token(const LlamaConfig& c, const std::string& policy, int tensor_size) {
  const int64_t a = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t E = c.emb_dim, Hq = c.num_query_heads / tensor_size;
  const int64_t q = Hq * c.head_dim, kv = c.num_kv_heads / tensor_size * c.head_dim;
  // A mixture of experts' hidden units are in its own buffers, which the table does not count.
  const int64_t F = c.moe ? 0 : c.mlp_dim / tensor_size;
  const bool none = policy == "none";
  const bool minimal = policy.starts_with("minimal");
  const bool save_dot = policy.starts_with("save_dot");
  const bool context = policy == "minimal_with_context" || policy == "minimal_flash" ||
                       policy == "save_dot_with_context_except_mlp";
  const struct {
    int64_t bytes;
    bool kept;
  } groups[] = {
      {2 * (E * a + 4), none},                                                       // norms
      {(q + 2 * kv) * a, none || minimal || save_dot || policy == "save_qkv_proj"},  // qkv
      {q * a + 4 * Hq, none || context},                                             // context
      {E * a, none || minimal || save_dot || policy == "save_out_proj"},             // out_proj
      {2 * F * a, none || minimal},                                                  // mlpwi
      {F * a, none},                                                                 // SwiGLU
  };
  int64_t bytes = 0;
  for (const auto& g : groups) bytes += g.kept ? c.num_layers * g.bytes : g.bytes;
  return bytes;
}

// The docs' "other": what allocate_activations holds besides the layers' views, summed from the
// tensors it allocated (a mixture of experts leaves the dense MLP's gradients unallocated).
int64_t allocated_other_bytes(const LlamaActivations& acts) {
  int64_t bytes = 0;
  for (const Tensor& t : acts.residual) bytes += static_cast<int64_t>(t.view().bytes());
  for (const Tensor* t :
       {&acts.rope_cos, &acts.rope_sin, &acts.final_norm_rstd, &acts.final_norm_out, &acts.logits,
        &acts.xent_lse, &acts.token_loss, &acts.proj, &acts.d_residual, &acts.d_normed, &acts.d_x,
        &acts.d_q, &acts.d_k, &acts.d_v, &acts.d_attn, &acts.d_gate, &acts.d_up, &acts.d_swiglu}) {
    if (!t->view().empty()) bytes += static_cast<int64_t>(t->view().bytes());
  }
  return bytes;
}

TEST(Remat, BytesPerTokenFollowTheDocsTable) {
  LlamaConfig bf16 = testing::tiny_config();
  bf16.dtype = DType::kBF16;
  LlamaConfig moe = testing::tiny_config();
  moe.moe = true;
  moe.num_experts = 4;
  moe.num_experts_per_tok = 2;
  const std::string supported = supported_remat_policies();
  for (const LlamaConfig& c : {testing::tiny_config(), bf16, moe}) {
    for (const int tensor_size : {1, 2}) {
      for (size_t begin = 0; begin <= supported.size();) {
        const size_t end = std::min(supported.find('|', begin), supported.size());
        const std::string policy = supported.substr(begin, end - begin);
        begin = end + 1;
        SCOPED_TRACE(policy + " " + std::string(dtype_name(c.dtype)) + (c.moe ? " moe" : "") +
                     " tensor " + std::to_string(tensor_size));
        const RematPolicy r = remat_policy_from(policy);
        const ActivationBytes formula = activation_bytes_per_token(c, r, tensor_size);
        EXPECT_EQ(formula.layers_per_token, docs_layers_per_token(c, policy, tensor_size));
        const int64_t B = 2, S = 12;
        const LlamaActivations acts =
            allocate_activations(kernels::backend(Device::kCpu), c, B, S, tensor_size, r);
        EXPECT_EQ(formula.other_bytes(B * S, c.vocab_tiles), allocated_other_bytes(acts));
      }
    }
  }
}

TEST(Remat, UnknownAndOffloadingPoliciesAreRefusedWithTheSupportedList) {
  for (const char* name : {"minimal_offloaded", "qkv_proj_offloaded", "fulll"}) {
    try {
      remat_policy_from(name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find("supported: none|full|minimal"), std::string::npos) << what;
    }
  }
  EXPECT_TRUE(remat_policy_from("none").save_all);
  EXPECT_FALSE(remat_policy_from("full").save_all);
  EXPECT_TRUE(remat_policy_from("minimal_flash").context);
}

// remat_policy=custom (MaxText's per-tensor keys): each group kept where its keys say.
CustomRemat offload_recipe() {  // MaxText's v6e recipe for Llama3.1-70B at 131072 tokens
  CustomRemat c;
  c.decoder_layer_input = RematLocation::kOffload;
  c.query_proj = c.key_proj = c.value_proj = RematLocation::kOffload;
  c.out_proj = RematLocation::kOffload;
  return c;
}

TEST(Remat, CustomKeepsEachTensorWhereItsKeySays) {
  const RematPolicy defaults = remat_policy_from("custom");
  const RematPolicy full = remat_policy_from("full");
  EXPECT_FALSE(defaults.save_all);
  EXPECT_EQ(std::tie(defaults.qkv, defaults.context, defaults.out_proj, defaults.mlpwi),
            std::tie(full.qkv, full.context, full.out_proj, full.mlpwi));
  EXPECT_FALSE(defaults.offloaded.any());

  const RematPolicy r = remat_policy_from("custom", offload_recipe());
  EXPECT_TRUE(r.qkv && r.out_proj && !r.context && !r.mlpwi);
  EXPECT_TRUE(r.offloaded.layer_input && r.offloaded.qkv && r.offloaded.out_proj);
  EXPECT_FALSE(r.offloaded.context || r.offloaded.mlpwi);
  const RematPolicy in_place = without_offload(r);
  EXPECT_FALSE(in_place.offloaded.any());
  EXPECT_TRUE(in_place.qkv && in_place.out_proj);

  CustomRemat gate_up;  // mlpwi_0 and mlpwi_1 together, on the device; the fused name alone too
  gate_up.mlpwi_0 = gate_up.mlpwi_1 = RematLocation::kDevice;
  EXPECT_TRUE(remat_policy_from("custom", gate_up).mlpwi);
  CustomRemat fused;
  fused.qkv_proj = RematLocation::kOffload;
  EXPECT_TRUE(remat_policy_from("custom", fused).offloaded.qkv);
}

TEST(Remat, CustomSetsThisEngineCannotKeepAreRefusedNamingTheKeys) {
  const auto refused = [](const CustomRemat& c, const std::string& expected) {
    try {
      remat_policy_from("custom", c);
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  CustomRemat c;
  c.decoder_layer_input = RematLocation::kRemat;
  refused(c, "decoder_layer_input = remat");
  c = {};
  c.query_proj = RematLocation::kDevice;
  c.key_proj = RematLocation::kOffload;
  refused(c, "query_proj = device but key_proj = offload");
  c = {};
  c.query_proj = c.key_proj = RematLocation::kDevice;  // value_proj recomputed
  refused(c, "query_proj, key_proj and value_proj must be kept or recomputed together");
  c = {};
  c.mlpwi_0 = RematLocation::kDevice;
  refused(c, "mlpwi_0 and mlpwi_1 must be kept or recomputed together");
  c = {};
  c.mlpwo = RematLocation::kOffload;  // the next layer's input, which stays on the device
  refused(c, "mlpwo = offload but decoder_layer_input = device");
  try {
    remat_location_from("out_proj", "host");
    ADD_FAILURE() << "a location 'host' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out_proj = 'host'"), std::string::npos) << e.what();
  }
}

// On the cpu the device's memory is the host's: an offloading policy keeps its tensors in place
// and allocates exactly what the same policy without offload does.
TEST(Remat, OnTheCpuOffloadedTensorsStayInPlace) {
  const LlamaConfig c = testing::tiny_config();
  const RematPolicy r = remat_policy_from("custom", offload_recipe());
  const LlamaActivations offloading =
      allocate_activations(kernels::backend(Device::kCpu), c, 2, 12, 1, r);
  const LlamaActivations in_place =
      allocate_activations(kernels::backend(Device::kCpu), c, 2, 12, 1, without_offload(r));
  EXPECT_FALSE(offloading.remat.offloaded.any());
  EXPECT_EQ(allocated_bytes(offloading), allocated_bytes(in_place));
  EXPECT_EQ(offloaded_bytes(offloading), 0);
}

// On a device backend (the emulated GPU): the offloaded views share one device buffer set, the
// layer inputs take turns in two buffers, and the host holds a copy per layer; the bytes are the
// formula's (activation_bytes_per_token, which `maxctx plan` uses).
TEST(Remat, OnADeviceOffloadedTensorsWaitInHostMemory) {
  const kernels::Kernels& device = kernels::emulated::emulated_gpu_kernels();
  for (const bool bf16 : {false, true}) {
    LlamaConfig c = testing::tiny_config();
    if (bf16) c.dtype = DType::kBF16;
    const RematPolicy r = remat_policy_from("custom", offload_recipe());
    const int64_t B = 2, S = 12, N = B * S;
    const LlamaActivations acts = allocate_activations(device, c, B, S, 1, r);
    ASSERT_TRUE(acts.remat.offloaded.layer_input);
    EXPECT_EQ(acts.residual.size(), 2u);
    const ActivationBytes formula = activation_bytes_per_token(c, r);
    EXPECT_EQ(offloaded_bytes(acts), formula.offloaded_per_token * N);
    EXPECT_EQ(allocated_bytes(acts),
              formula.layers_per_token * N + formula.other_bytes(N, c.vocab_tiles));
    // Per token: the layers' inputs (L of them) and q, k, v and the stream after attention.
    const int64_t a = static_cast<int64_t>(dtype_size(c.dtype));
    const int64_t q = c.num_query_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    EXPECT_EQ(formula.offloaded_per_token, c.num_layers * (c.emb_dim + q + 2 * kv + c.emb_dim) * a);
    // Less on the device than the same tensors kept there.
    const LlamaActivations on_device = allocate_activations(device, c, B, S, 1, without_offload(r));
    // Together they hold what the in-place policy does plus one more set of what is offloaded
    // (the device's shared buffers: q, k, v and the stream after attention) and one more layer
    // input (the second of the two turns; in place, L+1 inputs share nothing).
    EXPECT_EQ(allocated_bytes(acts) + offloaded_bytes(acts),
              allocated_bytes(on_device) + (q + 2 * kv + c.emb_dim + c.emb_dim) * a * N);
  }
}

}  // namespace
}  // namespace maxctx::model
