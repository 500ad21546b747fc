#include "model/readout.h"

#include <ATen/record_function.h>

#include "model/language_model.h"

namespace cart::model {

std::vector<double> ReadToHost(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& t : tensors) {
    if (t.defined()) flat.push_back(t.detach().reshape({-1}).to(torch::kFloat64));
  }
  if (flat.empty()) return {};
  RECORD_FUNCTION(kReadToHostScope, std::vector<c10::IValue>());
  torch::Tensor host = torch::cat(flat).to(torch::kCPU).contiguous();  // (n)
  const double* p = host.data_ptr<double>();
  return std::vector<double>(p, p + host.numel());
}

Diagnostics Read(const DiagnosticTensors& t) {
  std::vector<torch::Tensor> all = {t.rho};
  all.insert(all.end(), t.h_norm.begin(), t.h_norm.end());
  all.insert(all.end(), t.rel_update.begin(), t.rel_update.end());
  const std::vector<double> v = ReadToHost(all);
  Diagnostics d;
  size_t i = 0;
  if (t.rho.defined()) {
    d.rho_max = v[0];
    d.rho_mean = v[1];
    d.rho_min = v[2];
    i = 3;
  }
  d.h_norm.assign(v.begin() + static_cast<std::ptrdiff_t>(i),
                  v.begin() + static_cast<std::ptrdiff_t>(i + t.h_norm.size()));
  i += t.h_norm.size();
  d.rel_update.assign(v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  d.anchor_calls = t.anchor_calls;
  return d;
}

Diagnostics LanguageModel::Rho() const {
  torch::Tensor rho = RhoTensor();
  Diagnostics d;
  if (!rho.defined()) {
    d.rho_max = d.rho_mean = d.rho_min = 1.0;
    return d;
  }
  const std::vector<double> v = ReadToHost({rho});
  d.rho_max = v[0];
  d.rho_mean = v[1];
  d.rho_min = v[2];
  return d;
}

}  // namespace cart::model
