#pragma once

// Input checks for the store's write calls, run on the caller's thread before anything is queued.
// Each returns InvalidArgument with a message naming the thing and the field.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "store/types.h"

namespace cart::store::internal {

absl::Status ValidateNewSweep(const NewSweep& sweep, int64_t max_runs);
absl::Status ValidateAudit(const Audit& audit);
// A seed plan (types.h NewPlan): power, alpha, budget, spending, sizes, claim entries, and each
// run as ValidateNewSweep checks a sweep's (its name aside: the store gives it).
absl::Status ValidateNewPlan(const NewPlan& plan);
// Per-item outcomes (types.h EvalItems), as RunStore::RecordEvalItems documents.
absl::Status ValidateEvalItems(int64_t run_id, const std::vector<EvalItems>& items);
// Data lineage records (types.h RunDataRecord): the role ("train", "val:NAME", "task:NAME"; each
// once), a path of 1..4096 bytes, and an identity's sha256 (64 lowercase hex digits), sizes
// (size >= 0, tokens >= -1) and text lengths. `what` names the run.
absl::Status ValidateRunData(const std::vector<RunDataRecord>& files, const std::string& what);
absl::Status ValidateWorkerId(const std::string& worker_id);
// A metric's name as the store keeps one: 1..128 letters, digits, '_', '.', '-' and '/'.
bool IsMetricName(std::string_view name);
absl::Status ValidateMetricBatch(int64_t run_id, const std::vector<MetricPoint>& points,
                                 int64_t max_points);
absl::Status ValidateCheckpoint(int64_t run_id, const NewCheckpoint& checkpoint);
// A tag's spelling (types.h): 1..kMaxTagBytes of letters, digits and "._:/=+@-".
absl::Status ValidateTag(const std::string& tag);
// Each tag's spelling, a tag both added and removed, and the note's size and characters;
// `what` names the run or sweep in the message ("run 12").
absl::Status ValidateAnnotationChange(const AnnotationChange& change, const std::string& what);

// The dedicated columns of a run, parsed from its params (after ValidateNewSweep).
struct RunColumns {
  int64_t d = 0;
  std::optional<int64_t> r;
  std::optional<int64_t> p;
  int64_t seed = 0;
  int64_t steps = 0;
};
RunColumns RunColumnsOf(const NewRun& run);

}  // namespace cart::store::internal
