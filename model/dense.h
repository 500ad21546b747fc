#pragma once

// The dense baseline (docs/model.md §4): L standard layers with full-rank attention, the same
// SwiGLU, RoPE, RMSNorm, tied embedding and final norm as CART.

#include <torch/torch.h>

#include "model/language_model.h"
#include "model/layers.h"

namespace cart::model {

class DenseImpl : public LanguageModel {
 public:
  explicit DenseImpl(const config::ModelConfig& config);
  torch::Tensor Forward(const torch::Tensor& ids, const ForwardOptions& options = {},
                        DiagnosticTensors* diag = nullptr) override;
  const config::ModelConfig& config() const override { return config_; }

  torch::nn::Embedding embed{nullptr};
  torch::nn::ModuleList layers{nullptr};  // "layers.{i}.…"
  RMSNorm final_norm{nullptr};

 private:
  config::ModelConfig config_;
};
TORCH_MODULE(Dense);

}  // namespace cart::model
