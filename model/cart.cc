// CART in LibTorch (model/: the model as docs/model.md specifies it, every switch of the
// ablations, and the dense baseline beside it).

#include "model/cart.h"

#include <cmath>

namespace cart::model {
namespace {

// A parameter-only submodule, so that its tensor is named "<module>.<name>" as in §8.
class ParamHolder : public torch::nn::Module {
 public:
  ParamHolder(const std::string& name, torch::Tensor init) {
    value = register_parameter(name, std::move(init));
  }
  torch::Tensor value;
};

}  // namespace

torch::Tensor LoopIndexTable() {
  torch::Tensor pe = torch::zeros({16, 32}, torch::kFloat32);
  torch::Tensor r = torch::arange(16, torch::kFloat32).unsqueeze(1);  // (16, 1)
  torch::Tensor div =
      torch::exp(torch::arange(0, 32, 2, torch::kFloat32) * (-std::log(10000.0) / 32.0));  // (16)
  pe.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 32, 2)}, torch::sin(r * div));
  pe.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1, 32, 2)}, torch::cos(r * div));
  return pe;
}

CartImpl::CartImpl(const config::ModelConfig& config) : config_(config) {
  const int64_t d = config.d;
  const int64_t hidden = config.mlp_hidden();
  const bool self_core = config.core_attn == config::CoreAttn::kSelf;
  embed = register_module("embed", torch::nn::Embedding(config.vocab, d));
  {
    torch::NoGradGuard no_grad;
    embed->weight.normal_(0.0, 0.02);
  }
  prelude = register_module("prelude", torch::nn::ModuleList());
  for (int i = 0; i < config.P; ++i) prelude->push_back(PreludeLayer(d, hidden));
  if (!self_core) anchor = register_module("anchor", Anchor(d));
  if (config.core == config::CoreSharing::kShared) {
    core = register_module("core", CoreBlock(d, hidden, self_core, config.cross_causal));
  } else {
    cores = register_module("core", torch::nn::ModuleList());
    for (int r = 0; r < config.R; ++r) {
      cores->push_back(CoreBlock(d, hidden, self_core, config.cross_causal));
    }
  }
  if (config.hyper) {
    auto h = std::make_shared<ParamHolder>("weights", torch::tensor({1.0f, 0.0f, 0.0f}));
    hyper_weights = register_module("hyper", h)->value;
  }
  if (config.lie) lie = register_module("lie", MakeLinear(32, d));
  if (config.lti) {
    auto a = std::make_shared<ParamHolder>("a", torch::full({d}, std::log(9.0f)));
    lti_a = register_module("lti", a)->value;
  }
  coda = register_module("coda", PreludeLayer(d, hidden));
  final_norm = register_module("final_norm", RMSNorm(d));
  pe_ = register_buffer("lie_table", LoopIndexTable());
}

CoreBlockImpl& CartImpl::CoreFor(int r) {
  if (core) return *core;
  return *cores->ptr<CoreBlockImpl>(r);
}

torch::Tensor CartImpl::RhoTensor() const {
  if (!lti_a.defined()) return {};
  torch::NoGradGuard no_grad;
  torch::Tensor s = torch::sigmoid(lti_a.to(torch::kFloat32));  // (d)
  return torch::stack({s.max(), s.mean(), s.min()});            // (3)
}

torch::Tensor CartImpl::Forward(const torch::Tensor& ids, const ForwardOptions& options,
                                DiagnosticTensors* diag) {
  const int loops = options.loops > 0 ? options.loops : config_.effective_R_infer();
  TORCH_CHECK(loops >= 1 && loops <= 16, "loops must be in 1..16, got ", loops);
  TORCH_CHECK(config_.core == config::CoreSharing::kShared || loops == config_.R,
              "an unshared core runs exactly R = ", config_.R, " loops, asked for ", loops);
  TORCH_CHECK(ids.dim() == 2, "ids must be (B, T), got ", ids.sizes());
  const int64_t T = ids.size(1);
  const int64_t anchor_calls_before = anchor ? anchor->calls : 0;
  const bool want_diag = options.diagnostics && diag != nullptr;

  const HeldStackedWeights held(*this);  // merged projections: stacked once per pass
  torch::Tensor x = embed(ids);          // (B, T, d)
  const RopeTables rope = MakeRope(T, x);
  for (const auto& layer : *prelude) x = layer->as<PreludeLayerImpl>()->forward(x, rope);
  const torch::Tensor e = x;  // the context anchor
  torch::Tensor K, V;
  if (anchor && config_.kv == config::KvMode::kFrozen) std::tie(K, V) = anchor(e);  // once

  torch::Tensor h = e;
  torch::Tensor buffer[3] = {e, e, e};  // hyper-connection ring, newest first
  torch::Tensor mix = config_.hyper ? torch::softmax(hyper_weights, 0) : torch::Tensor();
  torch::Tensor carry = config_.lti ? torch::sigmoid(lti_a) : torch::Tensor();
  if (want_diag) {
    diag->h_norm.clear();
    diag->rel_update.clear();
  }
  for (int r = 0; r < loops; ++r) {
    torch::Tensor h_in =
        config_.hyper ? mix[0] * buffer[0] + mix[1] * buffer[1] + mix[2] * buffer[2] : buffer[0];
    if (config_.lie) h_in = h_in + lie(pe_[r].to(h_in.scalar_type()));  // broadcast over (B, T)
    if (anchor && config_.kv == config::KvMode::kRecompute) std::tie(K, V) = anchor(h_in);
    torch::Tensor t = CoreFor(r).forward(h_in, K, V, rope);
    // Faithfulness note 1: `paper` keeps the reference code's double residual (t contains h_in);
    // `delta` is the paper's stated equation h = σ(a) ⊙ h_in + (t − h_in).
    torch::Tensor update = config_.gate == config::GateMode::kPaper ? t : t - h_in;
    torch::Tensor h_prev = h;
    h = config_.lti ? carry * h_in + update : h_in + update;
    buffer[2] = buffer[1];
    buffer[1] = buffer[0];
    buffer[0] = h;
    if (want_diag) {
      torch::NoGradGuard no_grad;
      torch::Tensor hf = h.to(torch::kFloat32);
      diag->h_norm.push_back(hf.norm(2, -1).mean());
      diag->rel_update.push_back((hf - h_prev.to(torch::kFloat32)).norm() /
                                 hf.norm().clamp_min(1e-30));
    }
  }
  h = coda(h, rope);
  torch::Tensor logits = torch::matmul(final_norm(h), embed->weight.t().to(h.scalar_type()));
  if (want_diag) {
    diag->rho = RhoTensor();
    diag->anchor_calls = anchor ? anchor->calls - anchor_calls_before : 0;
  }
  return logits;  // (B, T, vocab)
}

}  // namespace cart::model
