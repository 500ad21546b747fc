#pragma once

// What may change in a run after it was submitted, as pure functions over its config: a resume's
// `--set` (docs/design.md "Resuming with a change"), an extension's learning-rate schedule
// (docs/design.md "Extending a run") and the micro-batch a device gets (docs/design.md
// "Out-of-memory lowers the micro-batch"). cartd applies them; the store keeps the result.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/accounting.h"
#include "config/config.h"

namespace cart::config {

// The keys a resume may change: each changes the trajectory from the checkpoint on, and none
// changes the model's shape, the data order or a column the store keeps apart.
const std::vector<std::string_view>& ResumeKeys();

// A resume's change to a run's config.
struct ResumeChange {
  RunConfig config;                  // with the values set, validated
  std::vector<std::string> changed;  // "lr 0.001 -> 0.0005", one per key whose value changed
};
// `set`: "key=value" items, applied in order. InvalidArgument naming the item for a key a resume
// may not change (with the keys it may), a value SetKey refuses, or when no value differs; the
// config's own check (Validate) otherwise.
absl::StatusOr<ResumeChange> ApplyResumeSet(RunConfig config, const std::vector<std::string>& set);

// A finished run extended to `total_steps`: its config under each schedule an extension may take,
// and the learning rates around the extension point.
struct Extension {
  int64_t from_step = 0;    // steps trained: the last step trained is this one (1-based)
  double lr_before = 0;     // the rate of that step
  RunConfig stretched;      // the cosine recomputed over the new total: a warm restart
  RunConfig held;           // goes on at the rate the run's own schedule ends with
  double stretched_lr = 0;  // the first extension step's rate under each
  double held_lr = 0;
  // The stretched rate over the one before: a plain extension stretches only within [0.5, 2].
  double StretchRatio() const;
  bool StretchIsGentle() const;
};
Extension PlanExtension(const RunConfig& config, int64_t total_steps);

// The micro-batch a run trains at on a device with `memory_bytes` usable and `kernels` (the
// worker's LibTorch and device; docs/model.md §5): the configured one when
// its estimate fits, else the largest that does (FitMicroBatch; the configured one when even 1
// does not), and never above `cap` (> 0: the run ran out of memory at a larger one). With `raise`
// (a GPU), the largest divisor of the global batch that fits, up to the global batch itself, so
// that a large card runs fewer, larger micro-batches. The global batch is kept by accumulation,
// so the run's results keep their meaning (they change by float rounding only). `capped`, when
// given, says whether the cap lowered it below what the memory allows.
MicroBatchFit MicroBatchOnDevice(const RunConfig& config, int64_t memory_bytes,
                                 const MemoryKernels& kernels, int64_t cap, bool* capped = nullptr,
                                 bool raise = false);

// The micro-batch to retry at after running out of memory at `micro`: the largest divisor of the
// global batch `global` below it. nullopt at micro-batch 1: only a bigger device helps then.
std::optional<int64_t> SmallerMicroBatch(int64_t global, int64_t micro);

}  // namespace cart::config
