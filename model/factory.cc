#include "common/strings.h"
#include "model/cart.h"
#include "model/dense.h"
#include "model/language_model.h"

namespace cart::model {

absl::StatusOr<std::shared_ptr<LanguageModel>> BuildModel(const config::ModelConfig& config,
                                                          int64_t seed) {
  config::RunConfig run;
  run.model = config;
  absl::Status valid = config::Validate(run);
  if (!valid.ok()) return valid;
  torch::manual_seed(static_cast<uint64_t>(seed));
  if (config.model == config::ModelKind::kDense) return std::make_shared<DenseImpl>(config);
  return std::make_shared<CartImpl>(config);
}

}  // namespace cart::model
