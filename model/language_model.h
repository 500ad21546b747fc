#pragma once

// The interface the trainer and evaluator use for any model of this project (CART or dense).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace cart::model {

// What a forward pass can report besides logits (CART only; dense leaves them empty), read to
// the host.
struct Diagnostics {
  double rho_max = 0, rho_mean = 0, rho_min = 0;  // over channels of σ(a); 1 when lti is off
  std::vector<double> h_norm;                     // per loop r: mean over tokens of ‖h_r‖₂
  std::vector<double> rel_update;  // per loop r: ‖h_r − h_{r−1}‖_F / ‖h_r‖_F, h_{−1} = e
  int64_t anchor_calls = 0;        // anchor projections computed in this forward
};

// The same, as it leaves a forward pass: fp32 tensors on the model's device, not yet read. On a
// GPU every read to the host waits for the device, so a caller reads what it needs together,
// once (Read below; the trainer adds the step's loss and gradient norm to the same read).
struct DiagnosticTensors {
  torch::Tensor rho;                      // (3): max, mean, min of σ(a) over channels
  std::vector<torch::Tensor> h_norm;      // per loop, 0-dim
  std::vector<torch::Tensor> rel_update;  // per loop, 0-dim
  int64_t anchor_calls = 0;
};

// Reads `t` to the host with one device-to-host copy.
Diagnostics Read(const DiagnosticTensors& t);

struct ForwardOptions {
  int loops = 0;             // CART loops for this pass, 1..16; 0: R_infer if set, else R
  bool diagnostics = false;  // fill *diag (costs a few reductions per loop)
};

class LanguageModel : public torch::nn::Module {
 public:
  // ids: (B, T) int64 token ids in [0, vocab). Returns logits (B, T, vocab) in the dtype of the
  // computation. Throws c10::Error on a shape or range error (the trainer turns it into a Status).
  virtual torch::Tensor Forward(const torch::Tensor& ids, const ForwardOptions& options = {},
                                DiagnosticTensors* diag = nullptr) = 0;
  virtual const config::ModelConfig& config() const = 0;
  // ρ statistics of σ(a) without running a forward pass: (3) max, mean, min, fp32 on the model's
  // device; undefined for a model without σ(a) (dense, lti off).
  virtual torch::Tensor RhoTensor() const { return {}; }
  // The same, read to the host (rho_* only; 1 where there is no σ(a), as for CART with lti off).
  Diagnostics Rho() const;
};

// Builds an initialised model for `config` (CART or dense), seeding Torch's generator with `seed`
// first so the same seed gives the same weights. InvalidArgument if the config is invalid.
absl::StatusOr<std::shared_ptr<LanguageModel>> BuildModel(const config::ModelConfig& config,
                                                          int64_t seed);

}  // namespace cart::model
