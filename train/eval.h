#pragma once

// Evaluation: validation perplexity exactly as docs/model.md §6 defines it.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/language_model.h"

namespace cart::train {

struct PerplexityResult {
  double mean_loss = 0;    // mean over sequences of the per-sequence mean CE, nats/token
  double perplexity = 0;   // exp(mean_loss)
  int64_t sequences = 0;   // sequences evaluated
  double stderr_loss = 0;  // standard error of mean_loss over sequences
};

// exp(mean per-sequence CE) over the first `max_sequences` windows (T+1 tokens at stride T) of the
// token file at `path`, batch 1, at `loops` CART loops (0: the model's R_infer / R).
absl::StatusOr<PerplexityResult> EvaluatePerplexity(model::LanguageModel& model,
                                                    const std::string& path, int64_t seq_len,
                                                    int64_t max_sequences, int loops = 0);

}  // namespace cart::train
