#pragma once

// Building blocks of CART and the dense baseline (docs/model.md §1–2). Module and parameter names
// are the checkpoint tensor names of §8, so named_parameters() is the export format.

#include <torch/torch.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <vector>

namespace cart::model {

inline constexpr int64_t kHeadDim = 64;

// Linear layer without bias, initialised N(0, 0.02) (§1: no biases, no depth-scaled init).
torch::nn::Linear MakeLinear(int64_t in, int64_t out);

// Projections that read one input can run as one matmul over their weights stacked by rows
// (docs/gpu.md "Merged projections"): q with the latent down-projection, k_up with v_up, SwiGLU's
// gate with up, the dense baseline's q, k and v. Fewer, larger kernels on a GPU, the same result up
// to the order of float sums. The parameters stay the separate tensors of §8, so checkpoints,
// exports and optimizer state are the same either way and cross freely between merged and unmerged
// runs. Off unless set (SetMergedProjections); a module holds each stacked weight for a forward
// pass (HeldStackedWeights), so the shared core stacks it once, not in every loop.
class MergesProjections {
 public:
  virtual ~MergesProjections() = default;
  bool merged() const { return merged_; }
  void set_merged(bool on) { merged_ = on; }
  // From now until Release, each stacked weight is made at its first use and kept, cast to the
  // autocast dtype when autocast is on (as autocast would cast it at every use).
  void Hold() { hold_ = true; }
  void Release() {
    hold_ = false;
    held_.clear();
  }

 protected:
  // Each part's projection of x: x·[W_0; W_1; …]ᵀ split by the parts' output widths when merged,
  // else one matmul per part. `slot` tells this module's groups apart for Hold.
  std::vector<torch::Tensor> Project(const torch::Tensor& x,
                                     std::initializer_list<torch::nn::Linear> parts, int slot);

 private:
  bool merged_ = false;
  bool hold_ = false;
  std::map<int, torch::Tensor> held_;
};

// Turns merged projections on or off in every module under `root`.
void SetMergedProjections(torch::nn::Module& root, bool on);

// Holds the stacked weights of every module under `root` while it lives (one forward pass).
class HeldStackedWeights {
 public:
  explicit HeldStackedWeights(torch::nn::Module& root);
  ~HeldStackedWeights();
  HeldStackedWeights(const HeldStackedWeights&) = delete;
  HeldStackedWeights& operator=(const HeldStackedWeights&) = delete;

 private:
  std::vector<std::shared_ptr<MergesProjections>> held_;
};

// RMSNorm with eps 1e-6, computed in fp32 and cast back, weight initialised to 1. On CUDA with a
// LibTorch that has the fused kernel (2.8+), fp32 input goes through at::rms_norm.
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// SwiGLU: down(silu(gate(x)) * up(x)), hidden = ceil(floor(8d/3) / 256) * 256.
class MlpImpl : public torch::nn::Module, public MergesProjections {
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
class MlaAttentionImpl : public torch::nn::Module, public MergesProjections {
 public:
  explicit MlaAttentionImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  torch::nn::Linear q_proj{nullptr}, kv_down{nullptr}, k_up{nullptr}, v_up{nullptr},
      o_proj{nullptr};
};
TORCH_MODULE(MlaAttention);

// Full-rank causal self-attention of the dense baseline: q, k, v, o each d×d, RoPE on q and k.
class DenseAttentionImpl : public torch::nn::Module, public MergesProjections {
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
class AnchorImpl : public torch::nn::Module, public MergesProjections {
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
