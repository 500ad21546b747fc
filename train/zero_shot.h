#pragma once

// Zero-shot evaluation scored as lm-evaluation-harness scores it: for each choice, the sum of
// the log-likelihoods of the tokens of " " + choice after the context; `acc` picks the choice
// with the largest sum, `acc_norm` the largest sum per character of the choice. LAMBADA reports
// `acc` (every target token is the model's argmax) and perplexity exp(−mean target
// log-likelihood). The task files are read by data/tasks.h.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "data/tasks.h"
#include "data/tokenizer.h"
#include "model/language_model.h"

namespace cart::train {

// One scoring request: token ids of the context and of the continuation.
struct ContinuationRequest {
  std::vector<int64_t> context;       // non-empty
  std::vector<int64_t> continuation;  // non-empty
};

struct ContinuationScore {
  double logprob = 0;   // Σ log p(continuation token | everything before it), nats
  bool greedy = false;  // every continuation token is the argmax of its position's logits
};

struct ZeroShotOptions {
  int loops = 0;          // CART loops (R_infer), 1..16; 0: the model's R_infer or R
  int64_t max_len = 512;  // model context: longer inputs keep their last max_len tokens
  int64_t batch = 8;      // requests per forward pass (right-padded; the model is causal)
  // Start every context with the tokenizer's BOS. lm-evaluation-harness does not for causal
  // models by default (its `add_bos_token` is off), so neither do we; a model trained on
  // BOS-prefixed documents may score better with it, which is why it is a switch and why every
  // task result records which was used.
  bool prepend_bos = false;
  // Forward passes under bf16 autocast (the run's precision); log-probabilities in fp32.
  bool mixed_precision = false;
};

// Scores every request; result i belongs to request i. Inputs longer than max_len are cut from
// the left, as lm-eval does. InvalidArgument for an empty context or continuation, a
// continuation longer than max_len, or an id outside the model's vocabulary. Deterministic: the
// batch size does not change any score beyond float rounding (a test checks ≤ 1e-4).
absl::StatusOr<std::vector<ContinuationScore>> ScoreContinuations(
    model::LanguageModel& model, const std::vector<ContinuationRequest>& requests,
    const ZeroShotOptions& options);

// Token ids of (context, " " + choice) as lm-eval's _encode_pair makes them: trailing spaces of
// the context move to the continuation, the pair is encoded whole, and the continuation is what
// follows the separately encoded context. With prepend_bos the tokenizer's BOS (when it has one)
// starts the context, as it starts every training document.
ContinuationRequest EncodePair(const data::Tokenizer& tokenizer, const std::string& context,
                               const std::string& continuation, bool prepend_bos);

struct TaskResult {
  std::string name;
  data::TaskKind kind = data::TaskKind::kHellaSwag;
  int64_t items = 0;
  double acc = 0, acc_stderr = 0;
  double acc_norm = 0, acc_norm_stderr = 0;  // multiple choice only
  // False for a multiple-choice task scored without acc_norm (an lm-eval registry task such as
  // winogrande, hf/harness.h); CART Lab's own scorer always has it.
  bool has_acc_norm = true;
  double perplexity = 0;       // LAMBADA only
  int64_t chance_choices = 0;  // choices per item when all items have the same count
  bool prepend_bos = false;    // whether contexts started with BOS (the option used)
  // Per item, in the task file's order (the paired tests over items read them): '1' where acc
  // counts it correct, else '0'; the same for acc_norm (multiple choice; else empty); each
  // item's target log-likelihood in nats (LAMBADA; else empty).
  std::string item_correct, item_correct_norm;
  std::vector<double> item_logprob;
  // Per item: every choice's log-likelihood (LAMBADA: the target's), the gold index, and the
  // choice acc and acc_norm pick (multiple choice; else empty). `cart eval --items` prints them,
  // so that a scorer can be compared with another item by item (docs/huggingface.md).
  std::vector<std::vector<double>> item_choice_logprob;
  std::vector<int> item_gold, item_choice, item_choice_norm;
};

// Aggregates the scores of a task's requests (for each item in order, one per choice) into its
// metrics. Ties go to the first choice, as numpy.argmax does. InvalidArgument when the number of
// scores does not match the task.
absl::StatusOr<TaskResult> AggregateTask(const data::Task& task,
                                         const std::vector<ContinuationScore>& scores);

// Encodes, scores and aggregates one task.
absl::StatusOr<TaskResult> EvaluateTask(model::LanguageModel& model,
                                        const data::Tokenizer& tokenizer, const data::Task& task,
                                        const ZeroShotOptions& options);

// The tokenizer a run was trained with: the one its train_data's metadata names.
// InvalidArgument when the run has no train_data; the token file's errors otherwise.
absl::StatusOr<std::unique_ptr<data::Tokenizer>> RunTokenizer(const config::RunConfig& config);

// Reads the run's zero-shot tasks (config.data.tasks: name -> "KIND=FILE[,limit=N]"), each
// named by its key, in name order. The errors of data::ParseTaskSource and data::LoadTask.
absl::StatusOr<std::vector<data::Task>> LoadRunTasks(const config::RunConfig& config);

}  // namespace cart::train
