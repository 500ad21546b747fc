#include "model/dense.h"

namespace cart::model {

DenseImpl::DenseImpl(const config::ModelConfig& config) : config_(config) {
  embed = register_module("embed", torch::nn::Embedding(config.vocab, config.d));
  {
    torch::NoGradGuard no_grad;
    embed->weight.normal_(0.0, 0.02);
  }
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < config.layers; ++i) {
    layers->push_back(DenseLayer(config.d, config.mlp_hidden()));
  }
  final_norm = register_module("final_norm", RMSNorm(config.d));
}

torch::Tensor DenseImpl::Forward(const torch::Tensor& ids, const ForwardOptions& options,
                                 DiagnosticTensors* diag) {
  TORCH_CHECK(ids.dim() == 2, "ids must be (B, T), got ", ids.sizes());
  const HeldStackedWeights held(*this);  // merged projections: stacked once per pass
  torch::Tensor x = embed(ids);          // (B, T, d)
  const RopeTables rope = MakeRope(ids.size(1), x);
  for (const auto& layer : *layers) x = layer->as<DenseLayerImpl>()->forward(x, rope);
  return torch::matmul(final_norm(x), embed->weight.t().to(x.scalar_type()));  // (B, T, vocab)
}

}  // namespace cart::model
