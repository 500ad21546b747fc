#include "store/internal/validate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

#include "common/status.h"
#include "common/strings.h"

namespace cart::store::internal {
namespace {

constexpr size_t kMaxSweepName = 128;
constexpr size_t kMaxRunName = 200;
constexpr size_t kMaxKey = 64;
constexpr size_t kMaxMetricName = 128;
constexpr size_t kMaxWorkerId = 128;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// 1..max characters, all letters, digits, '_', '.', '-' (and '/' when allow_slash).
bool IsName(std::string_view text, size_t max, bool allow_slash = false) {
  if (text.empty() || text.size() > max) return false;
  for (char c : text) {
    if (!IsNameChar(c) && !(allow_slash && c == '/')) return false;
  }
  return true;
}

bool IsLowerHex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::optional<int64_t> IntParam(const NewRun& run, const std::string& key) {
  auto it = run.params.find(key);
  if (it == run.params.end()) return std::nullopt;
  return ParseInt64(it->second);
}

absl::Status ValidateRun(const std::string& sweep, const NewRun& run) {
  // Only on the error path: formatting runs for every one of 10,000 runs would cost more than
  // the checks.
  auto where = [&] { return StrCat("run '", run.name, "' of sweep '", sweep, "'"); };
  if (!IsName(run.name, kMaxRunName)) {
    return absl::InvalidArgumentError(StrCat("sweep '", sweep, "': run name '", run.name,
                                             "' must be 1..", kMaxRunName,
                                             " letters, digits, '_', '.', '-'"));
  }
  if (run.config_yaml.empty()) return absl::InvalidArgumentError(StrCat(where(), ": empty config"));
  for (const auto& [key, value] : run.params) {
    if (!IsName(key, kMaxKey)) {
      return absl::InvalidArgumentError(StrCat(where(), ": bad config key '", key, "'"));
    }
  }
  for (const char* key : {"d", "seed", "steps"}) {
    if (!run.params.count(key)) {
      return absl::InvalidArgumentError(StrCat(where(), ": config key '", key, "' is missing"));
    }
  }
  for (const char* key : {"d", "seed", "steps", "R", "P"}) {
    auto it = run.params.find(key);
    if (it != run.params.end() && !ParseInt64(it->second)) {
      return absl::InvalidArgumentError(
          StrCat(where(), ": config key '", key, "' = '", it->second, "' is not an integer"));
    }
  }
  if (*IntParam(run, "steps") <= 0) {
    return absl::InvalidArgumentError(StrCat(where(), ": steps must be positive"));
  }
  if (run.stored_params < 0 || run.effective_params < 0 || run.memory_estimate_bytes < 0) {
    return absl::InvalidArgumentError(
        StrCat(where(), ": parameter counts and memory estimate must not be negative"));
  }
  if (run.min_memory_bytes < 0 || run.min_memory_bytes > run.memory_estimate_bytes) {
    return absl::InvalidArgumentError(StrCat(where(), ": min_memory_bytes ", run.min_memory_bytes,
                                             " must be between 0 and the memory estimate ",
                                             run.memory_estimate_bytes));
  }
  if (!(run.work_hours >= 0) || run.work_hours > 1e9) {  // NaN fails the first test
    return absl::InvalidArgumentError(
        StrCat(where(), ": work_hours ", run.work_hours, " must be between 0 and 1e9"));
  }
  if (run.seed_group.size() > 8192) {
    return absl::InvalidArgumentError(StrCat(where(), ": seed_group of ", run.seed_group.size(),
                                             " bytes is over the 8192 allowed"));
  }
  if (run.max_attempts < 1) {
    return absl::InvalidArgumentError(
        StrCat(where(), ": max_attempts must be at least 1, got ", run.max_attempts));
  }
  const bool has_parent = !run.parent_name.empty() || run.parent_run_id.has_value();
  if (!run.parent_name.empty() && run.parent_run_id) {
    return absl::InvalidArgumentError(
        StrCat(where(), ": give parent_name or parent_run_id, not both"));
  }
  if (has_parent) {
    const std::optional<int64_t> step = ParseInt64(run.parent_checkpoint);
    if (run.parent_checkpoint != "final" && !(step && *step >= 0)) {
      return absl::InvalidArgumentError(StrCat(where(), ": parent checkpoint '",
                                               run.parent_checkpoint,
                                               "' must be \"final\" or a step number"));
    }
  } else if (!run.parent_checkpoint.empty()) {
    return absl::InvalidArgumentError(StrCat(where(), ": parent checkpoint without a parent"));
  }
  if (run.parent_name == run.name) {
    return absl::InvalidArgumentError(StrCat(where(), ": a run cannot be its own parent"));
  }
  if (!run.data.empty()) return ValidateRunData(run.data, where());
  return absl::OkStatus();
}

bool IsSha256(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

absl::Status ValidateNewSweep(const NewSweep& sweep, int64_t max_runs) {
  if (!IsName(sweep.name, kMaxSweepName)) {
    return absl::InvalidArgumentError(StrCat("sweep name '", sweep.name, "' must be 1..",
                                             kMaxSweepName, " letters, digits, '_', '.', '-'"));
  }
  if (sweep.client_request_id.empty()) {
    return absl::InvalidArgumentError(
        StrCat("sweep '", sweep.name, "': client request id is empty"));
  }
  if (sweep.runs.empty()) {
    return absl::InvalidArgumentError(StrCat("sweep '", sweep.name, "' has no runs"));
  }
  if (static_cast<int64_t>(sweep.runs.size()) > max_runs) {
    return absl::InvalidArgumentError(StrCat("sweep '", sweep.name, "' has ", sweep.runs.size(),
                                             " runs; the limit is ", max_runs));
  }
  std::set<std::string_view> names;
  for (const NewRun& run : sweep.runs) {
    CART_RETURN_IF_ERROR(ValidateRun(sweep.name, run));
    if (!names.insert(run.name).second) {
      return absl::InvalidArgumentError(
          StrCat("sweep '", sweep.name, "' has two runs named '", run.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateEvalItems(int64_t run_id, const std::vector<EvalItems>& items) {
  if (items.empty() || items.size() > kMaxEvalTasks) {
    return absl::InvalidArgumentError(
        StrCat("run ", run_id, ": ", items.size(), " task records; give 1 to ", kMaxEvalTasks));
  }
  std::set<std::pair<std::string_view, int>> seen;
  for (const EvalItems& e : items) {
    const std::string what = StrCat("run ", run_id, ": task '", ValidUtf8(e.task.substr(0, 80)),
                                    "' at ", e.loops, " loops");
    if (!IsName(e.task, kMaxKey)) {
      return absl::InvalidArgumentError(
          StrCat(what, ": the task name must be 1..", kMaxKey, " letters, digits, '_', '.', '-'"));
    }
    if (e.loops < 1 || e.loops > 16) {
      return absl::InvalidArgumentError(StrCat(what, ": loops must be 1..16"));
    }
    if (!seen.emplace(e.task, e.loops).second) {
      return absl::InvalidArgumentError(StrCat(what, ": given twice"));
    }
    if (e.correct.empty() || e.correct.size() > kMaxEvalItems) {
      return absl::InvalidArgumentError(
          StrCat(what, ": ", e.correct.size(), " items; give 1 to ", kMaxEvalItems));
    }
    auto binary = [](const std::string& s) {
      return std::all_of(s.begin(), s.end(), [](char c) { return c == '0' || c == '1'; });
    };
    if (!binary(e.correct) || !binary(e.correct_norm)) {
      return absl::InvalidArgumentError(
          StrCat(what, ": correct and correct_norm hold one '0' or '1' per item"));
    }
    if ((!e.correct_norm.empty() && e.correct_norm.size() != e.correct.size()) ||
        (!e.logprob.empty() && e.logprob.size() != e.correct.size())) {
      return absl::InvalidArgumentError(StrCat(
          what, ": correct_norm (", e.correct_norm.size(), ") and logprob (", e.logprob.size(),
          ") must each be empty or one per item (", e.correct.size(), ")"));
    }
    for (size_t i = 0; i < e.logprob.size(); ++i) {
      if (!std::isfinite(e.logprob[i]) || e.logprob[i] > 0) {
        return absl::InvalidArgumentError(StrCat(what, ": item ", i, "'s log-likelihood ",
                                                 e.logprob[i], " is not a finite value <= 0"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNewPlan(const NewPlan& plan) {
  if (!(plan.power > 0 && plan.power < 1) || !(plan.alpha > 0 && plan.alpha < 1)) {
    return absl::InvalidArgumentError(
        StrCat("plan: power ", plan.power, " and alpha ", plan.alpha, " must each be in (0, 1)"));
  }
  if (plan.budget_hours && !(*plan.budget_hours >= 0 && *plan.budget_hours < 1e9)) {
    return absl::InvalidArgumentError(
        StrCat("plan: budget ", *plan.budget_hours, " RTX 3090 hours must be in [0, 1e9)"));
  }
  if (plan.spending != "obrien-fleming" && plan.spending != "pocock") {
    return absl::InvalidArgumentError(
        StrCat("plan: spending '", plan.spending, "' is not obrien-fleming or pocock"));
  }
  if (plan.text.size() > kMaxPlanTextBytes) {
    return absl::InvalidArgumentError(
        StrCat("plan: its text is ", plan.text.size(), " bytes; at most ", kMaxPlanTextBytes));
  }
  if (plan.claims.empty() || plan.runs.empty()) {
    return absl::InvalidArgumentError("plan: it names no claim or queues no run");
  }
  if (plan.runs.size() > kMaxPlanRuns) {
    return absl::InvalidArgumentError(
        StrCat("plan: ", plan.runs.size(), " runs; at most ", kMaxPlanRuns));
  }
  std::set<std::string_view> claims;
  for (const PlanClaim& c : plan.claims) {
    if (c.claim.empty() || c.claim.size() > 200 || !claims.insert(c.claim).second) {
      return absl::InvalidArgumentError(StrCat("plan: claim id '", ValidUtf8(c.claim.substr(0, 80)),
                                               "' is empty, longer than 200 bytes or given twice"));
    }
    if (c.seeds_now < 0 || c.seeds_target < c.seeds_now || c.runs < 0 || !(c.hours >= 0)) {
      return absl::InvalidArgumentError(
          StrCat("plan: claim '", c.claim, "' has seeds ", c.seeds_now, " -> ", c.seeds_target,
                 ", ", c.runs, " runs, ", c.hours,
                 " hours; each must be >= 0 and the target at least the seeds now"));
    }
  }
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const NewPlanRun& r = plan.runs[i];
    NewRun named = r.run;
    named.name = "plan";  // the store names it; the rest is checked as any run
    if (r.parent_entry >= static_cast<int>(i) || (r.parent_entry >= 0 && r.run.parent_run_id)) {
      return absl::InvalidArgumentError(
          StrCat("plan: run ", i, " names parent entry ", r.parent_entry,
                 (r.run.parent_run_id ? " and a parent run" : ""),
                 "; a parent entry must come earlier, and not beside a parent run"));
    }
    if (r.parent_entry >= 0) named.parent_name = "parent";
    CART_RETURN_IF_ERROR(ValidateRun(r.sweep, named));
  }
  return absl::OkStatus();
}

absl::Status ValidateRunData(const std::vector<RunDataRecord>& files, const std::string& what) {
  constexpr size_t kMaxPath = 4096, kMaxText = 1024;
  if (files.size() > kMaxDataFiles) {
    return absl::InvalidArgumentError(
        StrCat(what, ": ", files.size(), " data files; at most ", kMaxDataFiles));
  }
  std::set<std::string_view> roles;
  for (const RunDataRecord& f : files) {
    const size_t colon = f.role.find(':');
    const std::string_view kind = std::string_view(f.role).substr(0, colon);
    const bool named =
        colon != std::string::npos && IsName(std::string_view(f.role).substr(colon + 1), kMaxKey);
    if (!(f.role == "train" || ((kind == "val" || kind == "task") && named))) {
      return absl::InvalidArgumentError(StrCat(what, ": data role '",
                                               ValidUtf8(f.role.substr(0, 80)),
                                               "' is not train, val:NAME or task:NAME"));
    }
    if (!roles.insert(f.role).second) {
      return absl::InvalidArgumentError(StrCat(what, ": data role '", f.role, "' given twice"));
    }
    if (f.path.empty() || f.path.size() > kMaxPath) {
      return absl::InvalidArgumentError(
          StrCat(what, ": data ", f.role, ": path must be 1..", kMaxPath, " bytes"));
    }
    if (f.recorded_by.size() > kMaxText) {
      return absl::InvalidArgumentError(
          StrCat(what, ": data ", f.role, ": recorded_by is over ", kMaxText, " bytes"));
    }
    if (!f.identity) continue;
    const data::FileIdentity& id = *f.identity;
    if (!IsSha256(id.sha256)) {
      return absl::InvalidArgumentError(StrCat(what, ": data ", f.role, ": sha256 '",
                                               ValidUtf8(id.sha256.substr(0, 80)),
                                               "' is not 64 lowercase hex digits"));
    }
    if (!id.tokenizer_sha256.empty() && !IsSha256(id.tokenizer_sha256)) {
      return absl::InvalidArgumentError(
          StrCat(what, ": data ", f.role,
                 ": tokenizer_sha256 is neither empty nor 64 lowercase hex digits"));
    }
    if (id.size_bytes < 0 || id.tokens < -1) {
      return absl::InvalidArgumentError(StrCat(what, ": data ", f.role, ": size_bytes ",
                                               id.size_bytes, " and tokens ", id.tokens,
                                               " must be >= 0 and >= -1"));
    }
    if (id.tokenizer.size() > kMaxPath) {
      return absl::InvalidArgumentError(
          StrCat(what, ": data ", f.role, ": tokenizer is over ", kMaxPath, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAudit(const Audit& audit) {
  if (audit.who.empty()) return absl::InvalidArgumentError("audit: who made the change is empty");
  return absl::OkStatus();
}

absl::Status ValidateWorkerId(const std::string& worker_id) {
  if (!IsName(worker_id, kMaxWorkerId)) {
    return absl::InvalidArgumentError(StrCat("worker id '", worker_id, "' must be 1..",
                                             kMaxWorkerId, " letters, digits, '_', '.', '-'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMetricBatch(int64_t run_id, const std::vector<MetricPoint>& points,
                                 int64_t max_points) {
  if (points.empty()) {
    return absl::InvalidArgumentError(StrCat("empty metric batch for run ", run_id));
  }
  if (static_cast<int64_t>(points.size()) > max_points) {
    return absl::InvalidArgumentError(StrCat("metric batch for run ", run_id, " has ",
                                             points.size(), " points; the limit is ", max_points));
  }
  for (const MetricPoint& point : points) {
    if (!IsName(point.name, kMaxMetricName, /*allow_slash=*/true)) {
      return absl::InvalidArgumentError(
          StrCat("metric batch for run ", run_id, ": bad metric name '", point.name, "'"));
    }
    if (point.step < 0) {
      return absl::InvalidArgumentError(StrCat("metric batch for run ", run_id, ": metric '",
                                               point.name, "' has negative step ", point.step));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpoint(int64_t run_id, const NewCheckpoint& checkpoint) {
  const std::string where = StrCat("checkpoint of run ", run_id, " at step ", checkpoint.step);
  if (checkpoint.step < 0) return absl::InvalidArgumentError(StrCat(where, ": negative step"));
  if (checkpoint.sha256.size() != 64 || !IsLowerHex(checkpoint.sha256)) {
    return absl::InvalidArgumentError(
        StrCat(where, ": sha256 '", checkpoint.sha256, "' is not 64 lowercase hex digits"));
  }
  if (checkpoint.size_bytes < 0) {
    return absl::InvalidArgumentError(StrCat(where, ": negative size"));
  }
  // Artifact paths are relative to the artifact store and never climb out of it.
  const std::string& path = checkpoint.path;
  bool bad = path.empty() || path.front() == '/' || path.find('\0') != std::string::npos;
  for (const std::string& part : Split(path, '/')) bad = bad || part == "..";
  if (bad) {
    return absl::InvalidArgumentError(
        StrCat(where, ": artifact path '", path, "' must be relative without '..'"));
  }
  return absl::OkStatus();
}

RunColumns RunColumnsOf(const NewRun& run) {
  RunColumns cols;
  cols.d = IntParam(run, "d").value_or(0);
  cols.r = IntParam(run, "R");
  cols.p = IntParam(run, "P");
  cols.seed = IntParam(run, "seed").value_or(0);
  cols.steps = IntParam(run, "steps").value_or(0);
  return cols;
}

absl::Status ValidateTag(const std::string& tag) {
  static constexpr std::string_view kTagPunctuation = "._:/=+@-";
  bool ok = !tag.empty() && tag.size() <= kMaxTagBytes;
  for (char c : tag) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && kTagPunctuation.find(c) == std::string_view::npos) ok = false;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("tag '", ValidUtf8(tag.substr(0, 2 * kMaxTagBytes)),
                                           "' must be 1..", kMaxTagBytes,
                                           " letters, digits and '._:/=+@-'"));
}

absl::Status ValidateAnnotationChange(const AnnotationChange& change, const std::string& what) {
  if (change.add_tags.size() > kMaxTags || change.remove_tags.size() > kMaxTags) {
    return absl::InvalidArgumentError(StrCat(what, ": at most ", kMaxTags, " tags in one change (",
                                             change.add_tags.size(), " added, ",
                                             change.remove_tags.size(), " removed)"));
  }
  for (const std::string& tag : change.add_tags) CART_RETURN_IF_ERROR(ValidateTag(tag));
  for (const std::string& tag : change.remove_tags) {
    CART_RETURN_IF_ERROR(ValidateTag(tag));
    for (const std::string& added : change.add_tags) {
      if (added == tag) {
        return absl::InvalidArgumentError(
            StrCat(what, ": tag '", tag, "' is both added and removed in one change"));
      }
    }
  }
  if (!change.note) return absl::OkStatus();
  const std::string& note = *change.note;
  if (note.size() > kMaxNoteBytes) {
    return absl::InvalidArgumentError(StrCat(what, ": a note holds at most ", kMaxNoteBytes,
                                             " bytes; this one has ", note.size()));
  }
  if (std::optional<size_t> bad = FirstInvalidUtf8(note)) {
    return absl::InvalidArgumentError(
        StrCat(what, ": the note is not UTF-8 (byte ", *bad, " of ", note.size(), ")"));
  }
  for (size_t i = 0; i < note.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(note[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      return absl::InvalidArgumentError(StrCat(what, ": the note has a control character (code ",
                                               static_cast<int>(c), ") at byte ", i,
                                               "; only newline and tab are allowed"));
    }
  }
  return absl::OkStatus();
}

bool IsMetricName(std::string_view name) {
  return IsName(name, kMaxMetricName, /*allow_slash=*/true);
}

}  // namespace cart::store::internal
