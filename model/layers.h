#pragma once

// Building blocks of CART and the dense baseline (docs/model.md §1–2). Module and parameter names
// are the checkpoint tensor names of §8, so named_parameters() is the export format.

#include <torch/torch.h>

#include <cstdint>

namespace cart::model {

inline constexpr int64_t kHeadDim = 64;

// Linear layer without bias, initialised N(0, 0.02) (§1: no biases, no depth-scaled init).
torch::nn::Linear MakeLinear(int64_t in, int64_t out);

// RMSNorm with eps 1e-6, computed in fp32 and cast back, weight initialised to 1.
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// SwiGLU: down(silu(gate(x)) * up(x)), hidden = ceil(floor(8d/3) / 256) * 256.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t d, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(Mlp);

// Rotary embedding tables for positions 0..T-1, base 10,000, rotate-half convention: cos and sin
// are concat(freqs, freqs), each (T, 64), on `like`'s device and dtype.
struct RopeTables {
  torch::Tensor cos, sin;
};
RopeTables MakeRope(int64_t T, const torch::Tensor& like);
// x: (B, H, T, 64) -> x·cos + rotate_half(x)·sin.
torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& rope);

// The profiler scope every attention call runs in (train/step_profile.h charges its ops to
// attention).
inline constexpr char kAttentionScope[] = "cart::attention";

// softmax(q kᵀ / 8 [+ causal mask]) v for q, k, v of shape (B, H, T, 64); softmax in fp32.
// `causal`: position t attends to 0..t only.
torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        bool causal);

// (B, T, d) -> (B, H, T, 64) and back.
torch::Tensor SplitHeads(const torch::Tensor& x);
torch::Tensor MergeHeads(const torch::Tensor& x);

// Low-rank ("MLA") causal self-attention (§2): q = Wq x; c = Wkv_down x (d -> d/4);
// k = Wk_up c, v = Wv_up c; RoPE on q and k; o = Wo y.
class MlaAttentionImpl : public torch::nn::Module {
 public:
  explicit MlaAttentionImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  torch::nn::Linear q_proj{nullptr}, kv_down{nullptr}, k_up{nullptr}, v_up{nullptr},
      o_proj{nullptr};
};
TORCH_MODULE(MlaAttention);

// Full-rank causal self-attention of the dense baseline: q, k, v, o each d×d, RoPE on q and k.
class DenseAttentionImpl : public torch::nn::Module {
 public:
  explicit DenseAttentionImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(DenseAttention);

// Prelude / coda layer: x = x + Attn(norm1(x)); x = x + MLP(norm2(x)).
class PreludeLayerImpl : public torch::nn::Module {
 public:
  PreludeLayerImpl(int64_t d, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  RMSNorm attn_norm{nullptr}, ffn_norm{nullptr};
  MlaAttention attn{nullptr};
  Mlp ffn{nullptr};
};
TORCH_MODULE(PreludeLayer);

// Dense-baseline layer, same two residual lines with full-rank attention.
class DenseLayerImpl : public torch::nn::Module {
 public:
  DenseLayerImpl(int64_t d, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  RMSNorm attn_norm{nullptr}, ffn_norm{nullptr};
  DenseAttention attn{nullptr};
  Mlp ffn{nullptr};
};
TORCH_MODULE(DenseLayer);

// The anchor projection, applied to the raw prelude output e (no norm, no RoPE):
// c = Wkv_down e; K = Wk_up c; V = Wv_up c, each returned as (B, H, T, 64).
class AnchorImpl : public torch::nn::Module {
 public:
  explicit AnchorImpl(int64_t d);
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& e);
  torch::nn::Linear kv_down{nullptr}, k_up{nullptr}, v_up{nullptr};
  int64_t calls = 0;  // forward() invocations, so tests can count anchor computations
};
TORCH_MODULE(Anchor);

// The core block, shared across loops (§2). Cross-attention form:
//   h = h_in + CrossAttn(norm1(h_in), K, V), q = Wq norm1(h_in) without RoPE;
//   h = h + MLP(norm2(h)).
// Self-attention form (`core_attn: self`): the attention is an MlaAttention over norm1(h_in).
// The return value contains h_in (faithfulness note 1).
class CoreBlockImpl : public torch::nn::Module {
 public:
  CoreBlockImpl(int64_t d, int64_t hidden, bool self_attention, bool causal);
  // K, V: (B, H, T, 64) from the anchor; ignored (may be undefined) for the self-attention form.
  torch::Tensor forward(const torch::Tensor& h_in, const torch::Tensor& K, const torch::Tensor& V,
                        const RopeTables& rope);
  RMSNorm attn_norm{nullptr}, ffn_norm{nullptr};
  torch::nn::Linear q_proj{nullptr}, o_proj{nullptr};  // cross-attention form
  MlaAttention attn{nullptr};                          // self-attention form
  Mlp ffn{nullptr};
  bool causal;
};
TORCH_MODULE(CoreBlock);

}  // namespace cart::model
