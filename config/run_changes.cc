// What a resume or an extension may change in a run's config (config/run_changes.h).

#include "config/run_changes.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "config/schedule.h"

namespace cart::config {

const std::vector<std::string_view>& ResumeKeys() {
  static const std::vector<std::string_view> keys = {"lr", "lr_min", "warmup", "clip", "dtype"};
  return keys;
}

absl::StatusOr<ResumeChange> ApplyResumeSet(RunConfig config, const std::vector<std::string>& set) {
  ResumeChange out;
  const std::vector<std::string_view>& keys = ResumeKeys();
  for (const std::string& item : set) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return absl::InvalidArgumentError(
          StrCat("resume --set ", ValidUtf8(item.substr(0, 200)), ": a resume may change only ",
                 StrJoin(keys, ", "),
                 " (keys that change the run from its checkpoint on without changing its "
                 "model or data)"));
    }
    const std::string before = GetKey(config, key).value_or("");
    CART_RETURN_IF_ERROR(ApplyOverrides(config, {item}));
    const std::string after = GetKey(config, key).value_or("");
    if (after != before) out.changed.push_back(StrCat(key, " ", before, " -> ", after));
  }
  if (out.changed.empty()) {
    return absl::InvalidArgumentError(
        StrCat("resume --set ", StrJoin(set, " "), ": no value differs from the run's config"));
  }
  CART_RETURN_IF_ERROR(Validate(config));
  out.config = std::move(config);
  return out;
}

double Extension::StretchRatio() const { return stretched_lr / std::max(lr_before, 1e-300); }

bool Extension::StretchIsGentle() const {
  const double ratio = StretchRatio();
  return !(ratio > 2 || ratio < 0.5);
}

Extension PlanExtension(const RunConfig& config, int64_t total_steps) {
  Extension out;
  out.from_step = config.train.steps;
  out.lr_before = ScheduledLr(config.train, out.from_step - 1);
  out.stretched = out.held = config;
  out.stretched.train.steps = out.held.train.steps = total_steps;
  out.stretched.train.lr_decay_steps = 0;
  if (out.held.train.lr_decay_steps == 0) out.held.train.lr_decay_steps = out.from_step;
  out.stretched_lr = ScheduledLr(out.stretched.train, out.from_step);
  out.held_lr = ScheduledLr(out.held.train, out.from_step);
  return out;
}

MicroBatchFit MicroBatchOnDevice(const RunConfig& config, int64_t memory_bytes,
                                 const MemoryKernels& kernels, int64_t cap, bool* capped,
                                 bool raise) {
  const int64_t global = config.train.batch * config.train.accum;
  int64_t micro = config.train.batch;
  if (const std::optional<MicroBatchFit> fit =
          FitMicroBatch(config, memory_bytes, kernels, raise ? global : 0)) {
    micro = fit->batch;
  }
  const bool lowered = cap > 0 && micro > cap;
  if (lowered) micro = LargestDivisorAtMost(global, cap);
  if (capped != nullptr) *capped = lowered;
  StepShape shape = ShapeOf(config, kernels);
  shape.micro_batch = micro;
  shape.accum = global / micro;
  return MicroBatchFit{micro, global / micro, EstimateTrainingBytes(config.model, shape, kernels)};
}

std::optional<int64_t> SmallerMicroBatch(int64_t global, int64_t micro) {
  if (micro <= 1 || global < 1) return std::nullopt;
  return LargestDivisorAtMost(global, micro - 1);
}

}  // namespace cart::config
