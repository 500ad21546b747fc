// The checks of a run config (config/config.h Validate): each key's range and the rules that tie
// keys together, each refusal naming the key, its value and what is allowed.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"

namespace cart::config {
namespace {

absl::Status Range(bool ok, std::string_view key, int64_t value, std::string_view allowed) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(key, ": ", value, " ", allowed));
}

}  // namespace

absl::Status Validate(const RunConfig& c) {
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  CART_RETURN_IF_ERROR(Range(m.vocab >= 2 && m.vocab <= (int64_t{1} << 32), "vocab", m.vocab,
                             "is outside 2..4294967296"));
  CART_RETURN_IF_ERROR(
      Range(m.d > 0 && m.d % 64 == 0, "d", m.d, "is not a positive multiple of 64 (head dim 64)"));
  CART_RETURN_IF_ERROR(Range(m.d <= 65'536, "d", m.d, "is above 65536"));
  if (m.model == ModelKind::kCart) {
    CART_RETURN_IF_ERROR(Range(m.P >= 1 && m.P <= 256, "P", m.P, "is outside 1..256"));
    CART_RETURN_IF_ERROR(Range(m.R >= 1 && m.R <= 16, "R", m.R,
                               "is outside 1..16 (the loop-index table has 16 rows)"));
    CART_RETURN_IF_ERROR(Range(m.R_infer >= 0 && m.R_infer <= 16, "R_infer", m.R_infer,
                               "is outside 1..16 (0 means the training R)"));
    if (m.core_attn == CoreAttn::kSelf && m.kv == KvMode::kRecompute) {
      return absl::InvalidArgumentError(
          "kv: recompute needs core_attn: cross (a self-attention core has no anchor to "
          "recompute)");
    }
    if (m.core_attn == CoreAttn::kSelf && !m.cross_causal) {
      return absl::InvalidArgumentError(
          "cross_causal: off needs core_attn: cross (a self-attention core is always causal)");
    }
    if (m.core == CoreSharing::kUnshared && m.R_infer != 0 && m.R_infer != m.R) {
      return absl::InvalidArgumentError(
          "R_infer: an unshared core has exactly R blocks, so R_infer must equal R");
    }
  } else {
    CART_RETURN_IF_ERROR(
        Range(m.layers >= 1 && m.layers <= 1024, "layers", m.layers, "is outside 1..1024"));
  }
  // Upper bounds far beyond any real run keep every count the accounting multiplies (tokens,
  // parameters, bytes) inside 64 bits.
  constexpr int64_t kMaxSteps = 1'000'000'000;
  CART_RETURN_IF_ERROR(
      Range(t.steps >= 1 && t.steps <= kMaxSteps, "steps", t.steps, "is outside 1..1000000000"));
  CART_RETURN_IF_ERROR(Range(t.seq_len >= 1 && t.seq_len <= 1'048'576, "seq_len", t.seq_len,
                             "is outside 1..1048576"));
  CART_RETURN_IF_ERROR(
      Range(t.batch >= 1 && t.batch <= 1'048'576, "batch", t.batch, "is outside 1..1048576"));
  CART_RETURN_IF_ERROR(
      Range(t.accum >= 1 && t.accum <= 65'536, "accum", t.accum, "is outside 1..65536"));
  const int64_t step_tokens = t.batch * t.accum * t.seq_len;  // < 2^56 within the bounds above
  if (step_tokens > (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(StrCat("batch × accum × seq_len: ", step_tokens,
                                             " tokens per optimizer step is above 4294967296"));
  }
  if (!(t.lr > 0 && t.lr <= 10)) return absl::InvalidArgumentError("lr: must be in (0, 10]");
  if (!(t.lr_min >= 0 && t.lr_min <= t.lr)) {
    return absl::InvalidArgumentError("lr_min: must be between 0 and lr");
  }
  CART_RETURN_IF_ERROR(Range(t.warmup >= 0 && t.warmup <= kMaxSteps, "warmup", t.warmup,
                             "is outside 0..1000000000"));
  CART_RETURN_IF_ERROR(Range(t.lr_decay_steps >= 0 && t.lr_decay_steps <= t.steps, "lr_decay_steps",
                             t.lr_decay_steps,
                             "is outside 0..steps (0: the cosine decays over every step)"));
  if (!(t.weight_decay >= 0 && t.weight_decay <= 100)) {
    return absl::InvalidArgumentError("weight_decay: must be in [0, 100]");
  }
  if (!(t.clip >= 0 && std::isfinite(t.clip))) {
    return absl::InvalidArgumentError("clip: must be a finite number >= 0 (0 disables)");
  }
  CART_RETURN_IF_ERROR(Range(t.log_every >= 1 && t.log_every <= kMaxSteps, "log_every", t.log_every,
                             "is outside 1..1000000000"));
  CART_RETURN_IF_ERROR(Range(t.eval_every >= 0 && t.eval_every <= kMaxSteps, "eval_every",
                             t.eval_every, "is outside 0..1000000000 (0 disables)"));
  CART_RETURN_IF_ERROR(Range(t.checkpoint_every >= 0 && t.checkpoint_every <= kMaxSteps,
                             "checkpoint_every", t.checkpoint_every,
                             "is outside 0..1000000000 (0: final checkpoint only)"));
  CART_RETURN_IF_ERROR(Range(t.keep_checkpoints >= 1 && t.keep_checkpoints <= 10'000,
                             "keep_checkpoints", t.keep_checkpoints, "is outside 1..10000"));
  CART_RETURN_IF_ERROR(Range(t.threads >= 0 && t.threads <= 1024, "threads", t.threads,
                             "is outside 0..1024 (0: all cores)"));
  CART_RETURN_IF_ERROR(Range(t.eval_sequences >= 1 && t.eval_sequences <= 1'000'000,
                             "eval_sequences", t.eval_sequences, "is outside 1..1000000"));
  // Set and task names become parts of metric names ("val_ppl/NAME", "task_acc/NAME").
  auto name_ok = [](const std::string& n) {
    return !n.empty() && n.size() <= 64 &&
           n.find_first_not_of(
               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
               std::string::npos;
  };
  for (const auto& [group, names] :
       {std::pair<const char*, const std::map<std::string, std::string>*>{"val_data",
                                                                          &c.data.val_data},
        {"tasks", &c.data.tasks}}) {
    for (const auto& [name, value] : *names) {
      if (!name_ok(name)) {
        return absl::InvalidArgumentError(
            StrCat(group, ": name '", name,
                   "' must be 1..64 letters, digits, '_', '.' or '-' (it becomes part of metric "
                   "names)"));
      }
    }
  }
  // Paths are short; a long string is copied into every run's stored config and params, so one
  // careless 20 KB path over a big grid became gigabytes of database.
  constexpr size_t kMaxPath = 4096;  // Linux's PATH_MAX
  constexpr size_t kMaxSets = 64;
  if (c.data.train_data.size() > kMaxPath) {
    return absl::InvalidArgumentError(
        StrCat("train_data: ", c.data.train_data.size(), " bytes; a path is at most ", kMaxPath));
  }
  for (const auto& [group, names] :
       {std::pair<const char*, const std::map<std::string, std::string>*>{"val_data",
                                                                          &c.data.val_data},
        {"tasks", &c.data.tasks}}) {
    if (names->size() > kMaxSets) {
      return absl::InvalidArgumentError(
          StrCat(group, ": ", names->size(), " entries; at most ", kMaxSets));
    }
    for (const auto& [name, value] : *names) {
      if (value.size() > kMaxPath + 64) {  // tasks: KIND=FILE,limit=N around the path
        return absl::InvalidArgumentError(
            StrCat(group, ".", name, ": ", value.size(), " bytes; a path is at most ", kMaxPath));
      }
    }
  }
  std::set<std::string> harness_tasks;
  for (const std::string& name : LmEvalTasks(c.data)) {
    if (!name_ok(name)) {
      return absl::InvalidArgumentError(
          StrCat("lm_eval: task name '", name,
                 "' must be 1..64 letters, digits, '_', '.' or '-', names separated by commas"));
    }
    if (!harness_tasks.insert(name).second) {
      return absl::InvalidArgumentError(StrCat("lm_eval: task '", name, "' named twice"));
    }
  }
  if (harness_tasks.size() > kMaxSets) {
    return absl::InvalidArgumentError(
        StrCat("lm_eval: ", harness_tasks.size(), " tasks; at most ", kMaxSets));
  }
  for (const auto& [name, spec] : c.data.tasks) {
    const size_t eq = spec.find('=');
    const std::string kind = spec.substr(0, eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || TaskSpecFile(spec).empty() ||
        (kind != "hellaswag" && kind != "piqa" && kind != "arc" && kind != "lambada")) {
      return absl::InvalidArgumentError(
          StrCat("tasks.", name, ": '", spec,
                 "' is not KIND=FILE[,limit=N] with KIND one of hellaswag, piqa, arc, lambada"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cart::config
