#pragma once

// The training loop of docs/model.md §6, usable from `cart train` and from cart-worker. No gRPC,
// no SQLite: progress leaves through callbacks.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace cart::train {

// One logged step: scalar metrics by name (loss, lr, grad_norm, tokens_per_s, rho_max, …; eval
// records carry val_loss/<set> and val_ppl/<set>).
struct MetricRecord {
  int64_t step = 0;
  std::map<std::string, double> values;
};

struct TrainOptions {
  std::string out_dir;  // receives config.yaml, metrics.jsonl, checkpoints/
  // Continue from the newest valid checkpoint in out_dir/checkpoints (the run's config is read from
  // out_dir/config.yaml; `config` is ignored except for steps when extend_to > 0).
  bool resume = false;
  int64_t extend_to = 0;  // with resume: new total step count (0: keep)
  // Start from the weights of this checkpoint file (a parent run's), with a fresh optimizer and
  // step 0: fine-tuning and other derived jobs. Empty: initialise from the seed.
  std::string init_from;
  int64_t stop_after = 0;  // stop (with a checkpoint) after this many steps in this call; 0: none
  std::function<void(const MetricRecord&)> on_metrics;           // every log_every / eval
  std::function<void(const CheckpointManifest&)> on_checkpoint;  // after each checkpoint
  std::function<void(const std::string&)> on_log;                // human-readable notices
  std::function<void(int64_t step, double loss)> on_step;        // after every optimizer step
  // Polled once per step; when it becomes true the loop writes a checkpoint and returns
  // (cancel, drain). May be null.
  const std::atomic<bool>* stop = nullptr;
  // Where to train (train/device.h): "auto" (cuda:0 when present, else cpu), "cpu" or "cuda:N".
  std::string device = "auto";
  // The optimizer step's kernels (train/optimizer.h); unset: DefaultStepKernels(), the fused ones
  // where LibTorch has them. Set by tests that compare the two.
  std::optional<StepKernels> step_kernels;
  // Projections that read one input as one matmul (model/layers.h MergesProjections); unset:
  // DefaultMergedProjections(device). Set by tests and `cart model bench` to compare.
  std::optional<bool> merged_projections;
  // Record the training step as a CUDA graph after kEagerStepsBeforeGraph steps and replay it
  // from then on (train/cuda_graph.h; docs/gpu.md "CUDA graphs"): needs a CUDA device and the
  // fused step kernels, and trains the capturable step (below). Off by default until a GPU has
  // measured it. A step the graph cannot hold is said in the log and training goes on without.
  bool cuda_graph = false;
  // The step a graph records, run as it is, on any device: inputs copied into fixed tensors, the
  // learning rate and AdamW's step counts on the device, ρ and the per-loop norms every step.
  // Tests compare it with the usual step; with cuda_graph it is what the steps before the
  // recording run, so that a replay and an eager step run the same kernels.
  bool capturable_step = false;
  // False: no checkpoint is written, not even the last (benchmarks: `cart model bench`). A run
  // trained so cannot be resumed.
  bool write_checkpoints = true;
  // fsync each checkpoint (train::CheckpointWriteOptions::durable). The worker turns it off: its
  // local file is a staging copy, and the durable one is the copy cartd's store keeps.
  bool durable_checkpoints = true;
  // Where old checkpoint files go instead of being deleted on the training thread
  // (train::CheckpointWriteOptions::discard); unset: deleted at once. With
  // background_checkpoints it is called from the writing thread.
  std::function<void(const std::string& path)> discard_checkpoint;
  // The training loop only copies model and optimizer into host memory (CheckpointSnapshot); a
  // thread serializes the copy and writes it to disk (WriteCheckpoint) while training goes on,
  // and on_checkpoint is called on the training thread at the first step after the write has
  // finished. At most one write is in flight: the next checkpoint, and the end of training, wait
  // for it. Costs a checkpoint's size in host memory (kept between checkpoints). The worker
  // turns it on; off, the loop streams the checkpoint to disk itself (docs/design.md "Storage").
  bool background_checkpoints = false;
  // The writing thread's nice value (and its disk I/O at the best-effort class's lowest level;
  // common/process.h LowerThisThreadsPriority): on a box whose cores train, the write takes what
  // training leaves instead of slowing the steps beside it. 0: the process's.
  int background_niceness = 10;
};

// How many steps of a run (or of a resumed attempt) train before its step is recorded as a CUDA
// graph (TrainOptions::cuda_graph): they set up what recording needs (cuBLAS's workspace on the
// graph's stream, the allocator's blocks).
inline constexpr int64_t kEagerStepsBeforeGraph = 3;

// Where the loss became non-finite.
struct Divergence {
  int64_t step = 0;  // the optimizer step (1-based)
  double loss = 0;   // NaN or ±inf
};

struct TrainResult {
  int64_t steps_done = 0;  // optimizer steps completed in total
  bool finished = false;   // reached config.train.steps
  // Set when the loss became non-finite: training stopped there (finished false), without a
  // checkpoint of the diverged weights. Resume is exact, so resuming unchanged diverges again.
  std::optional<Divergence> diverged;
  double final_loss = 0;        // mean train loss of the last step
  bool leak_suspected = false;  // a validation loss fell below the data's entropy floor
  std::string last_checkpoint;  // path of the newest checkpoint file
};

// "loss became nan at step 37 (diverged; lower lr or check the data)".
std::string DivergenceMessage(const Divergence& d);

// Trains `config` (or resumes the run in options.out_dir). A non-finite loss is not an error: the
// result says where (TrainResult::diverged). Errors: InvalidArgument for a bad
// config or data, NotFound for missing files, DataLoss when no valid checkpoint can be resumed,
// Internal for a LibTorch error (its message included), ResourceExhausted for out-of-memory.
absl::StatusOr<TrainResult> Train(const config::RunConfig& config, const TrainOptions& options);

// The number of intra-op threads a config asks for (threads, or the cores present).
int ThreadsFor(const config::TrainConfig& config);
// Makes `threads` govern every pool that runs a training step. When the BLAS is OpenBLAS (Debian's
// libblas.so.3 with libopenblas0-pthread) it has a pool of its own beside LibTorch's intra-op
// pool, and the two together oversubscribe the cores: then OpenBLAS gets `threads` (the matrix
// multiplies, most of a step) and LibTorch's pool one thread. Measured on 2 cores
// (bench/threads_bench.sh): LibTorch 1 + OpenBLAS 2 is 1.8x LibTorch 2 + OpenBLAS 2 and 1.2x
// LibTorch 2 + OpenBLAS 1. Other BLAS builds (MKL in pytorch.org's LibTorch) share LibTorch's
// pool, which gets `threads`. An OPENBLAS_NUM_THREADS set in the environment is left alone, and
// LibTorch's pool then gets `threads`.
void UseThreads(int threads);

// Makes glibc keep freed memory for the next allocation instead of handing it back to the kernel.
// By default every block of 128 KiB or more (after the first frees, up to 32 MiB) is a fresh mmap,
// so the step's large tensors (the 32 MiB of logits at vocab 4096, the attention scores) arrive as
// zeroed pages, fault by fault, every step. No mmap and a 1 GiB trim threshold instead: +8 %
// tokens/s at 1 thread on the performance issue's run, for about 17 % more resident memory (the
// peak of one step is kept). A GLIBC_TUNABLES that sets malloc options is left alone. Process
// wide; harmless for CUDA tensors, which glibc does not allocate.
void RetainFreedMemory();

}  // namespace cart::train
