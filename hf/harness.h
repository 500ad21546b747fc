#pragma once

// lm-evaluation-harness run on a model directory (hf/export.h), as cart-worker runs it for an
// evaluation job whose config names lm_eval tasks (docs/huggingface.md "Harness tasks in
// sweeps"): hf/python/cart_harness.py, written into a work directory and started with the given
// Python (the project's pinned environment, deploy/install-torch2.sh), scores every task with the
// harness's own definition and writes each item's choice log-likelihoods, which come back here
// as train::TaskResult, the form CART Lab's own scorer gives, so that metrics, per-item rows and
// `cart report` read either.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "train/zero_shot.h"

namespace cart::hf {

struct HarnessTask {
  std::string name;  // what the results are named (task_acc/<name>, ...)
  // A local file in a published format (data/tasks.h kinds: hellaswag, piqa, arc, lambada), or,
  // with kind and path empty, the task `name` of the harness's registry.
  std::string kind, path, labels;
  int64_t limit = 0;  // local files: at most this many items; 0: all
};

struct HarnessRequest {
  std::string python;          // interpreter with torch, transformers and lm-eval
  std::string model_dir;       // written by ExportHfModel
  std::string work_dir;        // scratch: the runner, its request, the task files, its log
  std::string device = "cpu";  // a torch device string
  int loops = 0;               // CART loops (R_infer) for this run; 0: the model's default
  int64_t batch = 1;           // requests per forward pass
  int64_t threads = 0;         // CPU threads for the harness's PyTorch; 0: its default
  bool add_bos = false;        // start every context with BOS (train.eval_bos)
  std::vector<HarnessTask> tasks;
  const std::atomic<bool>* stop = nullptr;  // when it turns true the harness is ended; may be null
};

// The tasks of `config` that the harness scores: each name of data.lm_eval, a local file where
// data.tasks has that name (its spec parsed as data::ParseTaskSource does), else a registry task.
// The errors of data::ParseTaskSource.
absl::StatusOr<std::vector<HarnessTask>> HarnessTasksFor(const config::RunConfig& config);

// Runs the harness and returns one result per task, in request order: acc, acc_norm (multiple
// choice) or perplexity (a loglikelihood task such as LAMBADA, given kind lambada), and the
// per-item fields of train::TaskResult. InvalidArgument with the runner's words for bad input (a
// task the harness does not have, naming similar ones; a missing or malformed file);
// FailedPrecondition when the Python cannot run the harness (not found: a bare name is looked
// up on PATH; no lm_eval); ResourceExhausted when it ran out of device memory (the worker
// requeues the job as for its own out-of-memory); Internal with the end of its log for anything
// else; Cancelled when *stop turned true while it ran (it is sent SIGTERM, and SIGKILL 10 s
// later). Blocks until the harness ends.
absl::StatusOr<std::vector<train::TaskResult>> RunHarness(const HarnessRequest& request);

}  // namespace cart::hf
