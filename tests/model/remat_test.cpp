// Activation recomputation (model/remat.h): every remat policy gives exactly the loss, logits and
// gradients of `none` (bit for bit: the backward recomputes with the same kernels on the same
// inputs), in fp32 and with bf16 activations, with tied embeddings and a sliding window too; the
// layers' saved bytes follow the documented formula; unknown and host-offloading names are
// refused with the supported list. Multi-rank meshes (context, tensor): tests/train_loop.
#include <gtest/gtest.h>

#include <cstring>

#include "maxctx/core/check.h"
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

// The layers' saved bytes are what activation_bytes_per_token says (the docs' formula).
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

TEST(Remat, UnknownAndOffloadingPoliciesAreRefusedWithTheSupportedList) {
  for (const char* name : {"minimal_offloaded", "qkv_proj_offloaded", "custom", "fulll"}) {
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

}  // namespace
}  // namespace maxctx::model
