#include "train/eval.h"

#include <cmath>

#include "common/status.h"
#include "common/strings.h"
#include "data/token_file.h"
#include "train/windows.h"

namespace cart::train {

absl::StatusOr<PerplexityResult> EvaluatePerplexity(model::LanguageModel& model,
                                                    const std::string& path, int64_t seq_len,
                                                    int64_t max_sequences, int loops) {
  CART_ASSIGN_OR_RETURN(data::TokenFile file, data::TokenFile::Open(path));
  if (file.info().vocab > model.config().vocab) {
    return absl::InvalidArgumentError(StrCat(path, ": vocabulary ", file.info().vocab,
                                             " is larger than the model's ", model.config().vocab));
  }
  CART_ASSIGN_OR_RETURN(WindowReader reader, WindowReader::Create(&file, seq_len));
  const int64_t n = std::min(max_sequences, reader.windows());
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  const torch::Device device = model.parameters().front().device();
  model::ForwardOptions options;
  options.loops = loops;
  std::vector<double> losses;
  for (int64_t i = 0; i < n; ++i) {
    CART_ASSIGN_OR_RETURN(Batch b, reader.At(i));
    torch::Tensor logits = model.Forward(b.x.to(device), options);
    torch::Tensor ce = torch::nn::functional::cross_entropy(
        logits.view({-1, logits.size(-1)}).to(torch::kFloat32), b.y.to(device).view({-1}));
    losses.push_back(ce.item<double>());
  }
  model.train(was_training);
  PerplexityResult r;
  r.sequences = n;
  double sum = 0;
  for (double l : losses) sum += l;
  r.mean_loss = sum / static_cast<double>(n);
  double var = 0;
  for (double l : losses) var += (l - r.mean_loss) * (l - r.mean_loss);
  r.stderr_loss = n > 1 ? std::sqrt(var / static_cast<double>(n - 1) / static_cast<double>(n)) : 0;
  r.perplexity = std::exp(r.mean_loss);
  return r;
}

}  // namespace cart::train
