#pragma once

// Evaluation: validation perplexity exactly as docs/model.md §6 defines it, and a checkpoint
// evaluated over loop counts (the variable-R curve), the one implementation behind `cart eval`
// and cart-worker's evaluation jobs.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "data/tasks.h"
#include "data/tokenizer.h"
#include "model/language_model.h"
#include "train/checkpoint.h"
#include "train/zero_shot.h"

namespace cart::train {

struct PerplexityResult {
  double mean_loss = 0;    // mean over sequences of the per-sequence mean CE, nats/token
  double perplexity = 0;   // exp(mean_loss)
  int64_t sequences = 0;   // sequences evaluated
  double stderr_loss = 0;  // standard error of mean_loss over sequences
};

// How an evaluation computes: windows per forward pass, and whether its forward passes run under
// bf16 autocast (as the run trains: UsesMixedPrecision of its dtype on the device). Losses are
// always reduced in fp32. Batching changes a loss by float rounding only; bf16 by what bf16 does
// to the logits (tests/train/eval_test.cc states both).
struct EvalCompute {
  int64_t batch = 1;
  bool mixed_precision = false;
};

// exp(mean per-sequence CE) over the first `max_sequences` windows (T+1 tokens at stride T) of the
// token file at `path`, `compute.batch` windows per forward pass, at `loops` CART loops (0: the
// model's R_infer / R), on the model's device, reading the losses to the host once. InvalidArgument
// for a vocabulary larger than the model's or a loop count the model cannot run (an unshared core
// runs exactly R); the token file's errors; what FromTorchError makes of a LibTorch error
// (ResourceExhausted for out-of-memory). Never throws.
absl::StatusOr<PerplexityResult> EvaluatePerplexity(model::LanguageModel& model,
                                                    const std::string& path, int64_t seq_len,
                                                    int64_t max_sequences, int loops = 0,
                                                    EvalCompute compute = {});

struct LoopEvaluation;

// What to evaluate a checkpoint on.
struct CheckpointEvalOptions {
  std::string device = "auto";  // train/device.h: auto | cpu | cuda | cuda:N
  int threads = 0;              // CPU threads; 0: the run config's (train::ThreadsFor)
  std::vector<int> loops;       // R_infer values; empty: the model's R_infer (or R)
  std::map<std::string, std::string> val_sets;  // name -> token file (.bin)
  std::vector<data::Task> tasks;                // zero-shot tasks
  const data::Tokenizer* tokenizer = nullptr;   // required when tasks is not empty
  int64_t seq_len = 0;                          // context; 0: the run's seq_len
  int64_t sequences = 0;     // windows per validation set; 0: the run's eval_sequences
  int64_t task_batch = 8;    // requests per forward pass for the tasks
  bool prepend_bos = false;  // contexts start with BOS (ZeroShotOptions::prepend_bos)
  const std::atomic<bool>* stop = nullptr;  // checked between loop counts; may be null
  // Scores more tasks at each loop count, after `tasks`, appending their results to e.tasks (the
  // worker's lm-evaluation-harness tasks, hf/harness.h); an error ends the evaluation with it.
  std::function<absl::Status(int loops, LoopEvaluation& e)> more_tasks;
  // Human-readable notices: first the device and precision it evaluates with (train::DeviceLine,
  // "device: cuda:0 (NVIDIA GeForce RTX 3090), bf16 autocast" or "device: cpu, fp32, because
  // ..."). May be empty.
  std::function<void(const std::string&)> on_log;
};

// The results at one loop count.
struct LoopEvaluation {
  int loops = 0;
  std::map<std::string, PerplexityResult> sets;  // by validation set name
  std::vector<TaskResult> tasks;                 // in the order of CheckpointEvalOptions::tasks
};

// Loads `checkpoint` (a run's, of `config`) into a fresh model on the options' device and
// evaluates it at each loop count, in ascending order without repeats (a worker acknowledges by
// step = R_infer, so steps must never go back), calling on_result after each. Stops early, with
// OK, once *stop turns true (Stopped() then says so). Errors: those of ResolveDevice, the
// model, the checkpoint, the data and EvaluatePerplexity / EvaluateTask. Never throws.
absl::Status EvaluateCheckpoint(const config::RunConfig& config,
                                const CheckpointManifest& checkpoint,
                                const CheckpointEvalOptions& options,
                                const std::function<void(const LoopEvaluation&)>& on_result);

// A LoopEvaluation as metrics, named as the results database keeps them: val_loss/<set>,
// val_ppl/<set>, task_acc/<task>, and task_acc_norm/<task> (multiple choice) or
// task_ppl/<task> (LAMBADA).
std::map<std::string, double> EvalMetrics(const LoopEvaluation& e);

}  // namespace cart::train
