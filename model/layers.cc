#include "model/layers.h"

#include <ATen/record_function.h>

#include <cmath>

#if __has_include(<ATen/ops/_fused_rms_norm.h>)
#include <ATen/ops/rms_norm.h>
#define CART_HAS_FUSED_RMS_NORM 1
#else
#define CART_HAS_FUSED_RMS_NORM 0
#endif

#include "model/autocast.h"

namespace cart::model {

torch::nn::Linear MakeLinear(int64_t in, int64_t out) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out).bias(false));
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, 0.02);
  return linear;
}

std::vector<torch::Tensor> MergesProjections::Project(
    const torch::Tensor& x, std::initializer_list<torch::nn::Linear> parts, int slot) {
  std::vector<torch::Tensor> out;
  out.reserve(parts.size());
  if (!merged_) {
    for (torch::nn::Linear part : parts) out.push_back(part->forward(x));
    return out;
  }
  torch::Tensor weight;
  if (auto it = held_.find(slot); it != held_.end()) {
    weight = it->second;
  } else {
    std::vector<torch::Tensor> rows;
    for (const auto& part : parts) rows.push_back(part->weight);
    weight = torch::cat(rows, 0);  // (Σ out, in)
    if (hold_) {
      const c10::DeviceType type = weight.device().type();
      if (AutocastEnabled(type)) weight = weight.to(AutocastDtype(type));
      held_[slot] = weight;
    }
  }
  const torch::Tensor y = torch::linear(x, weight);
  int64_t at = 0;
  for (const auto& part : parts) {
    const int64_t width = part->weight.size(0);
    out.push_back(y.narrow(-1, at, width));
    at += width;
  }
  return out;
}

void SetMergedProjections(torch::nn::Module& root, bool on) {
  if (auto* self = dynamic_cast<MergesProjections*>(&root)) self->set_merged(on);
  // include_self would need `root` to be owned by a shared_ptr.
  for (const auto& m : root.modules(/*include_self=*/false)) {
    if (auto merging = std::dynamic_pointer_cast<MergesProjections>(m)) merging->set_merged(on);
  }
}

HeldStackedWeights::HeldStackedWeights(torch::nn::Module& root) {
  // The models hold it over their submodules; a model is no MergesProjections itself.
  for (const auto& m : root.modules(/*include_self=*/false)) {
    auto merging = std::dynamic_pointer_cast<MergesProjections>(m);
    if (merging && merging->merged()) {
      merging->Hold();
      held_.push_back(std::move(merging));
    }
  }
}

HeldStackedWeights::~HeldStackedWeights() {
  for (const auto& m : held_) m->Release();
}

RMSNormImpl::RMSNormImpl(int64_t d) { weight = register_parameter("weight", torch::ones({d})); }

// Reductions run in fp32, or in fp64 when the input is fp64 (the gradient check runs in double).
static torch::Dtype ReductionType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
#if CART_HAS_FUSED_RMS_NORM
  // LibTorch's rms_norm, one fused kernel on CUDA where the LibTorch has it (_fused_rms_norm),
  // instead of six. Only for fp32 input (the residual stream is fp32 even under autocast): there
  // the cast back below is a no-op and both orders multiply by the weight in fp32, so it is the
  // same function; bf16 input keeps the spec's order (cast back, then the weight).
  if (x.is_cuda() && x.scalar_type() == torch::kFloat32) {
    return at::rms_norm(x, {x.size(-1)}, weight, 1e-6);
  }
#endif
  torch::Tensor xf = x.to(ReductionType(x));
  torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + 1e-6);
  return normed.to(x.scalar_type()) * weight;
}

MlpImpl::MlpImpl(int64_t d, int64_t hidden) {
  gate = register_module("gate", MakeLinear(d, hidden));
  up = register_module("up", MakeLinear(d, hidden));
  down = register_module("down", MakeLinear(hidden, d));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  const std::vector<torch::Tensor> gate_up = Project(x, {gate, up}, 0);
  return down(torch::silu(gate_up[0]) * gate_up[1]);
}

RopeTables MakeRope(int64_t T, const torch::Tensor& like) {
  auto opts = torch::TensorOptions().dtype(ReductionType(like)).device(like.device());
  torch::Tensor inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, kHeadDim, 2, opts) /
                                                         static_cast<double>(kHeadDim));
  torch::Tensor freqs = torch::outer(torch::arange(T, opts), inv_freq);  // (T, 32)
  torch::Tensor emb = torch::cat({freqs, freqs}, -1);                    // (T, 64)
  return {emb.cos().to(like.scalar_type()), emb.sin().to(like.scalar_type())};
}

torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& rope) {
  const int64_t half = kHeadDim / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half);
  torch::Tensor x2 = x.narrow(-1, half, half);
  torch::Tensor rotated = torch::cat({-x2, x1}, -1);  // rotate_half, (B, H, T, 64)
  // The tables take x's dtype: under bf16 autocast q and k leave their projections in bf16 while
  // the tables (made from the fp32 embedding) are fp32, and the product would promote q and k to
  // fp32 beside a bf16 v (twice the activation memory, and mixed dtypes at attention).
  const torch::ScalarType dtype = x.scalar_type();
  return x * rope.cos.to(dtype) + rotated * rope.sin.to(dtype);
}

torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        bool causal) {
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(),
              "attention inputs must share one dtype; got q ", q.scalar_type(), ", k ",
              k.scalar_type(), ", v ", v.scalar_type());
  RECORD_FUNCTION(kAttentionScope, std::vector<c10::IValue>());
#if TORCH_VERSION_MAJOR >= 2
  // SDPA's default scale is 1/sqrt(64) = 1/8, the spec's.
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
#else
  const int64_t T = q.size(-2);
  // The scale 1/8 goes on q (B, H, T, 64), not on the scores (B, H, T, T): a quarter of the
  // memory traffic at T = 256, and the same bits, since a power of two scales exactly. The mask
  // is filled in place: the product is not needed for the backward pass.
  torch::Tensor scores = torch::matmul(q * 0.125, k.transpose(-2, -1)).to(ReductionType(q));
  if (causal) {
    torch::Tensor mask = torch::ones({T, k.size(-2)}, q.options().dtype(torch::kBool)).triu(1);
    scores.masked_fill_(mask, -std::numeric_limits<float>::infinity());
  }
  torch::Tensor probs = torch::softmax(scores, -1).to(v.scalar_type());  // (B, H, T, T)
  return torch::matmul(probs, v);                                        // (B, H, T, 64)
#endif
}

torch::Tensor SplitHeads(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), d = x.size(2);
  return x.view({B, T, d / kHeadDim, kHeadDim}).transpose(1, 2);  // (B, H, T, 64)
}

torch::Tensor MergeHeads(const torch::Tensor& x) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2);
  return x.transpose(1, 2).reshape({B, T, H * kHeadDim});  // (B, T, d)
}

MlaAttentionImpl::MlaAttentionImpl(int64_t d) {
  q_proj = register_module("q_proj", MakeLinear(d, d));
  kv_down = register_module("kv_down", MakeLinear(d, d / 4));
  k_up = register_module("k_up", MakeLinear(d / 4, d));
  v_up = register_module("v_up", MakeLinear(d / 4, d));
  o_proj = register_module("o_proj", MakeLinear(d, d));
}

torch::Tensor MlaAttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  const std::vector<torch::Tensor> q_c = Project(x, {q_proj, kv_down}, 0);
  const torch::Tensor& c = q_c[1];  // (B, T, d/4) latent
  const std::vector<torch::Tensor> k_v = Project(c, {k_up, v_up}, 1);
  torch::Tensor q = ApplyRope(SplitHeads(q_c[0]), rope);  // (B, H, T, 64)
  torch::Tensor k = ApplyRope(SplitHeads(k_v[0]), rope);  // (B, H, T, 64)
  torch::Tensor v = SplitHeads(k_v[1]);                   // (B, H, T, 64)
  return o_proj(MergeHeads(Attention(q, k, v, /*causal=*/true)));
}

DenseAttentionImpl::DenseAttentionImpl(int64_t d) {
  q_proj = register_module("q_proj", MakeLinear(d, d));
  k_proj = register_module("k_proj", MakeLinear(d, d));
  v_proj = register_module("v_proj", MakeLinear(d, d));
  o_proj = register_module("o_proj", MakeLinear(d, d));
}

torch::Tensor DenseAttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  const std::vector<torch::Tensor> qkv = Project(x, {q_proj, k_proj, v_proj}, 0);
  torch::Tensor q = ApplyRope(SplitHeads(qkv[0]), rope);  // (B, H, T, 64)
  torch::Tensor k = ApplyRope(SplitHeads(qkv[1]), rope);  // (B, H, T, 64)
  torch::Tensor v = SplitHeads(qkv[2]);                   // (B, H, T, 64)
  return o_proj(MergeHeads(Attention(q, k, v, /*causal=*/true)));
}

PreludeLayerImpl::PreludeLayerImpl(int64_t d, int64_t hidden) {
  attn_norm = register_module("attn_norm", RMSNorm(d));
  attn = register_module("attn", MlaAttention(d));
  ffn_norm = register_module("ffn_norm", RMSNorm(d));
  ffn = register_module("ffn", Mlp(d, hidden));
}

torch::Tensor PreludeLayerImpl::forward(const torch::Tensor& x_in, const RopeTables& rope) {
  torch::Tensor x = x_in + attn->forward(attn_norm(x_in), rope);
  return x + ffn(ffn_norm(x));
}

DenseLayerImpl::DenseLayerImpl(int64_t d, int64_t hidden) {
  attn_norm = register_module("attn_norm", RMSNorm(d));
  attn = register_module("attn", DenseAttention(d));
  ffn_norm = register_module("ffn_norm", RMSNorm(d));
  ffn = register_module("ffn", Mlp(d, hidden));
}

torch::Tensor DenseLayerImpl::forward(const torch::Tensor& x_in, const RopeTables& rope) {
  torch::Tensor x = x_in + attn->forward(attn_norm(x_in), rope);
  return x + ffn(ffn_norm(x));
}

AnchorImpl::AnchorImpl(int64_t d) {
  kv_down = register_module("kv_down", MakeLinear(d, d / 4));
  k_up = register_module("k_up", MakeLinear(d / 4, d));
  v_up = register_module("v_up", MakeLinear(d / 4, d));
}

std::pair<torch::Tensor, torch::Tensor> AnchorImpl::forward(const torch::Tensor& e) {
  ++calls;
  torch::Tensor c = kv_down(e);  // (B, T, d/4)
  const std::vector<torch::Tensor> k_v = Project(c, {k_up, v_up}, 0);
  return {SplitHeads(k_v[0]), SplitHeads(k_v[1])};  // (B, H, T, 64) each
}

CoreBlockImpl::CoreBlockImpl(int64_t d, int64_t hidden, bool self_attention, bool causal)
    : causal(causal) {
  attn_norm = register_module("attn_norm", RMSNorm(d));
  if (self_attention) {
    attn = register_module("attn", MlaAttention(d));
  } else {
    q_proj = register_module("q_proj", MakeLinear(d, d));
    o_proj = register_module("o_proj", MakeLinear(d, d));
  }
  ffn_norm = register_module("ffn_norm", RMSNorm(d));
  ffn = register_module("ffn", Mlp(d, hidden));
}

torch::Tensor CoreBlockImpl::forward(const torch::Tensor& h_in, const torch::Tensor& K,
                                     const torch::Tensor& V, const RopeTables& rope) {
  torch::Tensor x = attn_norm(h_in);
  torch::Tensor a;
  if (attn) {
    a = attn->forward(x, rope);
  } else {
    torch::Tensor q = SplitHeads(q_proj(x));  // (B, H, T, 64), no RoPE on q
    a = o_proj(MergeHeads(Attention(q, K, V, causal)));
  }
  torch::Tensor h = h_in + a;
  return h + ffn(ffn_norm(h));
}

}  // namespace cart::model
