#pragma once

// CART, the Context-Anchored Recurrent Transformer (docs/model.md §3), with every switch of §4.

#include <torch/torch.h>

#include "model/language_model.h"
#include "model/layers.h"

namespace cart::model {

// The fixed loop-index sinusoid table pe[16, 32] (§3).
torch::Tensor LoopIndexTable();

class CartImpl : public LanguageModel {
 public:
  explicit CartImpl(const config::ModelConfig& config);
  torch::Tensor Forward(const torch::Tensor& ids, const ForwardOptions& options = {},
                        DiagnosticTensors* diag = nullptr) override;
  const config::ModelConfig& config() const override { return config_; }
  torch::Tensor RhoTensor() const override;

  // Submodules, named as the checkpoint tensors of §8.
  torch::nn::Embedding embed{nullptr};
  torch::nn::ModuleList prelude{nullptr};
  Anchor anchor{nullptr};                // absent with core_attn: self
  CoreBlock core{nullptr};               // core: shared
  torch::nn::ModuleList cores{nullptr};  // core: unshared, registered as "core"
  PreludeLayer coda{nullptr};
  RMSNorm final_norm{nullptr};
  torch::nn::Linear lie{nullptr};  // Linear(32 -> d), absent with lie: off
  torch::Tensor hyper_weights;     // "hyper.weights", (3), init [1, 0, 0]
  torch::Tensor lti_a;             // "lti.a", (d), init ln 9

 private:
  CoreBlockImpl& CoreFor(int r);
  config::ModelConfig config_;
  torch::Tensor pe_;  // (16, 32), not a parameter
};
TORCH_MODULE(Cart);

}  // namespace cart::model
