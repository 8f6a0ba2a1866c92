#include "maxctx/model/activations.h"

#include "maxctx/core/check.h"

namespace maxctx::model {
namespace {

// One view of a layer: its shape, dtype, and whether the remat policy keeps it per layer (else
// it lives in the scratch set every layer shares). The one list that allocation and the byte
// count below read.
struct LayerField {
  TensorView LayerActivations::*member;
  Shape shape;
  DType dtype;
  bool kept;
  bool offloaded = false;  // kept in host memory: its device buffer is the shared scratch one
  bool own() const { return kept && !offloaded; }
};

std::vector<LayerField> layer_fields(const LlamaConfig& c, const RematPolicy& r, int64_t batch,
                                     int64_t seq, int tensor_size) {
  const auto [N, E, Hq, Hkv, D, F] = local_dims(c, batch, seq, tensor_size);
  // What the forward saves for backward is in the activation dtype; statistics are f32.
  const DType dt = c.dtype;
  const DType f32 = DType::kF32;
  using A = LayerActivations;
  const RematPolicy::Offloaded& off = r.offloaded;
  std::vector<LayerField> fields = {
      {&A::attn_norm_rstd, {N}, f32, r.save_all},
      {&A::attn_norm_out, {N, E}, dt, r.save_all},
      {&A::q, {N, Hq, D}, dt, r.save_all || r.qkv, off.qkv},
      {&A::k, {N, Hkv, D}, dt, r.save_all || r.qkv, off.qkv},
      {&A::v, {N, Hkv, D}, dt, r.save_all || r.qkv, off.qkv},
      {&A::attn_out, {N, Hq, D}, dt, r.save_all || r.context, off.context},
      {&A::lse, {batch, Hq, seq}, f32, r.save_all || r.context, off.context},
      {&A::residual_mid, {N, E}, dt, r.save_all || r.out_proj, off.out_proj},
      {&A::mlp_norm_rstd, {N}, f32, r.save_all},
      {&A::mlp_norm_out, {N, E}, dt, r.save_all},
  };
  // A mixture of experts keeps its hidden units in its own buffers (LayerActivations::moe).
  if (c.moe) return fields;
  fields.push_back({&A::gate, {N, F}, dt, r.save_all || r.mlpwi, off.mlpwi});
  fields.push_back({&A::up, {N, F}, dt, r.save_all || r.mlpwi, off.mlpwi});
  fields.push_back({&A::swiglu_out, {N, F}, dt, r.save_all});
  return fields;
}

int64_t bytes_of(const Shape& shape, DType dtype) {
  return shape.numel() * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

int64_t logit_rows(int64_t tokens, int64_t vocab_tiles) {
  MAXCTX_CHECK(vocab_tiles >= 1, "num_vocab_tiling = {} must be at least 1", vocab_tiles);
  return (tokens + vocab_tiles - 1) / vocab_tiles;
}

int64_t ActivationBytes::other_bytes(int64_t tokens, int64_t vocab_tiles) const {
  return other_per_token * tokens + logits_per_row * logit_rows(tokens, vocab_tiles);
}

LocalDims local_dims(const LlamaConfig& c, int64_t batch, int64_t seq, int tensor_size) {
  return {batch * seq,
          c.emb_dim,
          c.num_query_heads / tensor_size,
          c.num_kv_heads / tensor_size,
          c.head_dim,
          c.mlp_dim / tensor_size};
}

LlamaActivations allocate_activations(const kernels::Kernels& k, const LlamaConfig& c,
                                      int64_t batch, int64_t seq, int tensor_size,
                                      const RematPolicy& remat, int64_t context) {
  const auto [N, E, Hq, Hkv, D, F] = local_dims(c, batch, seq, tensor_size);
  // Statistics, logits, the tensor-axis sums (proj) and the backward's gradients are f32.
  const DType dt = c.dtype;
  LlamaActivations a;
  a.batch = batch;
  a.seq = seq;
  // The cpu's memory is the host's: what the policy offloads stays where it is (remat.h).
  a.remat = k.device() == Device::kCpu ? without_offload(remat) : remat;
  a.rope_cos = k.empty({N, D / 2});
  a.rope_sin = k.empty({N, D / 2});
  const bool inputs_offloaded = a.remat.offloaded.layer_input;
  const int64_t input_buffers = inputs_offloaded ? 2 : c.num_layers + 1;
  for (int64_t l = 0; l < input_buffers; ++l) a.residual.push_back(k.empty({N, E}, dt));
  if (inputs_offloaded) {
    for (int64_t l = 0; l < c.num_layers; ++l)
      a.offloaded.layer_inputs.emplace_back(Shape{N, E}, dt);
  }
  const std::vector<LayerField> fields = layer_fields(c, a.remat, batch, seq, tensor_size);
  LayerActivations scratch;
  for (const LayerField& f : fields) {
    if (f.own()) continue;
    scratch.*f.member = a.storage.emplace_back(k.empty(f.shape, f.dtype)).view();
    if (f.offloaded) {
      OffloadedActivations::Field& field = a.offloaded.fields.emplace_back();
      field.member = f.member;
      for (int64_t l = 0; l < c.num_layers; ++l) field.host.emplace_back(f.shape, f.dtype);
    }
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerActivations& layer = a.layers.emplace_back();
    for (const LayerField& f : fields) {
      layer.*f.member =
          f.own() ? a.storage.emplace_back(k.empty(f.shape, f.dtype)).view() : scratch.*f.member;
    }
    if (c.moe) layer.moe = allocate_moe_buffers(k, c, batch, seq, context);
  }
  a.final_norm_rstd = k.empty({N});
  a.final_norm_out = k.empty({N, E}, dt);
  a.logits = k.empty({logit_rows(N, c.vocab_tiles), c.vocab_size});
  a.xent_lse = k.empty({N});
  a.token_loss = k.empty({N});
  a.proj = k.empty({N, E});
  a.d_residual = k.empty({N, E});
  a.d_normed = k.empty({N, E});
  a.d_x = k.empty({N, E});
  a.d_q = k.empty({N, Hq, D});
  a.d_k = k.empty({N, Hkv, D});
  a.d_v = k.empty({N, Hkv, D});
  a.d_attn = k.empty({N, Hq, D});
  if (c.moe) {
    a.moe_grad = allocate_moe_grad_buffers(k, c, batch, seq, context);
  } else {
    a.d_gate = k.empty({N, F});
    a.d_up = k.empty({N, F});
    a.d_swiglu = k.empty({N, F});
  }
  return a;
}

TensorView layer_input(LlamaActivations& a, int64_t layer) {
  const bool turns = a.remat.offloaded.layer_input;
  return a.residual[static_cast<size_t>(turns ? layer % 2 : layer)].view();
}

namespace {

void to_host(const kernels::Kernels& k, Tensor& host, TensorView device) {
  k.offload_to_host_async(host.view().raw(), device.raw(), device.bytes());
}
void to_device(const kernels::Kernels& k, TensorView device, const Tensor& host) {
  k.copy_from_host_async(device.raw(), host.view().raw(), device.bytes());
}

}  // namespace

void offload_layer_input(const kernels::Kernels& k, LlamaActivations& a, int64_t layer) {
  if (!a.remat.offloaded.layer_input || layer >= static_cast<int64_t>(a.layers.size())) return;
  to_host(k, a.offloaded.layer_inputs[static_cast<size_t>(layer)], layer_input(a, layer));
}

void offload_layer(const kernels::Kernels& k, LlamaActivations& a, int64_t layer) {
  const LayerActivations& views = a.layers[static_cast<size_t>(layer)];
  for (OffloadedActivations::Field& f : a.offloaded.fields) {
    to_host(k, f.host[static_cast<size_t>(layer)], views.*f.member);
  }
}

void begin_backward(const kernels::Kernels& k, const LlamaActivations& a) {
  if (a.remat.offloaded.any()) k.synchronize();
}

void restore_layer(const kernels::Kernels& k, LlamaActivations& a, int64_t layer) {
  if (a.remat.offloaded.layer_input) {
    to_device(k, layer_input(a, layer), a.offloaded.layer_inputs[static_cast<size_t>(layer)]);
  }
  const LayerActivations& views = a.layers[static_cast<size_t>(layer)];
  for (const OffloadedActivations::Field& f : a.offloaded.fields) {
    to_device(k, views.*f.member, f.host[static_cast<size_t>(layer)]);
  }
}

int64_t offloaded_bytes(const LlamaActivations& a) {
  int64_t bytes = 0;
  for (const Tensor& t : a.offloaded.layer_inputs) bytes += static_cast<int64_t>(t.view().bytes());
  for (const OffloadedActivations::Field& f : a.offloaded.fields) {
    for (const Tensor& t : f.host) bytes += static_cast<int64_t>(t.view().bytes());
  }
  return bytes;
}

int64_t allocated_bytes(const LlamaActivations& a) {
  int64_t bytes = 0;
  // An unallocated Tensor's view is an empty scalar: nothing held.
  const auto add = [&](const Tensor& t) {
    if (!t.view().empty()) bytes += static_cast<int64_t>(t.view().bytes());
  };
  for (const Tensor* t :
       {&a.rope_cos, &a.rope_sin, &a.final_norm_rstd, &a.final_norm_out, &a.logits, &a.xent_lse,
        &a.token_loss, &a.proj, &a.d_residual, &a.d_normed, &a.d_x, &a.d_q, &a.d_k, &a.d_v,
        &a.d_attn, &a.d_gate, &a.d_up, &a.d_swiglu}) {
    add(*t);
  }
  for (const Tensor& t : a.residual) add(t);
  for (const Tensor& t : a.storage) add(t);
  for (const LayerActivations& l : a.layers) {
    for (const Tensor* t :
         {&l.moe.router_logits, &l.moe.router_probs, &l.moe.expert_in, &l.moe.gate, &l.moe.up,
          &l.moe.hidden, &l.moe.expert_out, &l.moe.statistics, &l.moe.send_in, &l.moe.local_out}) {
      add(*t);
    }
  }
  const MoeGradBuffers& g = a.moe_grad;
  for (const Tensor* t : {&g.d_rows, &g.d_hidden, &g.d_gate, &g.d_up, &g.d_in, &g.d_logits,
                          &g.d_choice_weight, &g.d_local, &g.d_in_local}) {
    add(*t);
  }
  return bytes;
}

ActivationBytes activation_bytes_per_token(const LlamaConfig& c, const RematPolicy& remat,
                                           int tensor_size) {
  ActivationBytes b;
  for (const LayerField& f : layer_fields(c, remat, 1, 1, tensor_size)) {
    b.layers_per_token += bytes_of(f.shape, f.dtype) * (f.own() ? c.num_layers : 1);
    if (f.offloaded) b.offloaded_per_token += bytes_of(f.shape, f.dtype) * c.num_layers;
  }
  const int64_t act = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t f32 = 4;
  const auto [N, E, Hq, Hkv, D, F] = local_dims(c, 1, 1, tensor_size);
  const int64_t q_dim = Hq * D;
  const int64_t kv_dim = Hkv * D;
  const bool inputs_offloaded = remat.offloaded.layer_input;
  if (inputs_offloaded) b.offloaded_per_token += c.num_layers * E * act;
  b.other_per_token = (inputs_offloaded ? 2 : c.num_layers + 1) * E * act  // layer inputs
                      + c.head_dim * f32                                   // RoPE cos and sin
                      + f32 + E * act                                      // final norm
                      + 2 * f32                                            // xent lse, token loss
                      + E * f32                                            // proj
                      + 3 * E * f32                 // d_residual, d_normed, d_x
                      + 2 * (q_dim + kv_dim) * f32  // d_q, d_k, d_v, d_attn
                      + (c.moe ? 0 : 3 * F * f32);  // d_gate, d_up, d_swiglu
  b.logits_per_row = c.vocab_size * f32;
  return b;
}

}  // namespace maxctx::model
