#pragma once

// Reading records out of the database: shared by the writer's calls (which read before they
// write) and the queries. Every function runs on the connection it is given, inside whatever
// transaction is open there.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "store/internal/sql.h"
#include "store/results.h"
#include "store/types.h"

// The device class of the attempt that wrote run `r`'s latest checkpoint, as an SQL expression
// over a runs row aliased `r` (NULL: no checkpoint). docs/architecture.md "Device classes".
#define CART_CHECKPOINT_CLASS_SQL                                                      \
  "(SELECT pa.device_class FROM checkpoints AS pc JOIN attempts AS pa ON pa.run_id = " \
  "pc.run_id AND pa.attempt = pc.attempt WHERE pc.run_id = r.id ORDER BY pc.step DESC LIMIT 1)"

namespace cart::store::internal {

// OK when the run exists, else NotFound "run <id> does not exist".
absl::Status RequireRun(Database& db, int64_t run_id);
// NotFound "run <id> does not exist". With params (the run_params map) filled in.
absl::StatusOr<RunRecord> LoadRun(Database& db, int64_t run_id);
// The run named `name` (its index) in sweep `sweep`; NotFound names "<sweep>/<name>".
absl::StatusOr<RunRecord> LoadRunByName(Database& db, const std::string& sweep,
                                        const std::string& name);
// NotFound "sweep '<name>' does not exist". run_counts filled in.
absl::StatusOr<SweepRecord> LoadSweepByName(Database& db, const std::string& name);
absl::StatusOr<SweepRecord> LoadSweepById(Database& db, int64_t sweep_id);
// nullopt when no sweep has this request id.
absl::StatusOr<std::optional<SweepRecord>> FindSweepByRequestId(Database& db,
                                                                const std::string& request_id);
absl::StatusOr<std::vector<SweepRecord>> LoadAllSweeps(Database& db);
// "SELECT <every run column> FROM runs AS r JOIN sweeps AS s ON s.id = r.sweep_id " (a trailing
// space; append WHERE ...), and the reader of one of its rows (params filled in).
extern const char kRunSelectSql[];
absl::StatusOr<RunRecord> ReadRunRow(Database& db, const Statement& row);
// Runs matching `filter`, by id, params filled in.
absl::StatusOr<std::vector<RunRecord>> LoadRuns(Database& db, const RunFilter& filter);

absl::StatusOr<std::optional<CheckpointRecord>> LatestCheckpoint(Database& db, int64_t run_id);
absl::StatusOr<std::optional<CheckpointRecord>> CheckpointAt(Database& db, int64_t run_id,
                                                             int64_t step);
absl::StatusOr<std::vector<CheckpointRecord>> LoadCheckpoints(Database& db, int64_t run_id);
absl::StatusOr<std::optional<AttemptRecord>> LoadAttempt(Database& db, int64_t run_id,
                                                         int64_t attempt);
absl::StatusOr<std::vector<AttemptRecord>> LoadAttempts(Database& db, int64_t run_id);
// The columns every read of events selects, in this order, and one row of them read.
#define CART_EVENT_COLUMNS "id, run_id, sweep_id, from_state, to_state, who, at_us, why, cause"
EventRecord ReadEvent(const Statement& row);

// A run's data lineage rows (types.h RunDataRecord): train first, then by role.
absl::StatusOr<std::vector<RunDataRecord>> LoadRunData(Database& db, int64_t run_id);

// The checkpoint a derived run starts from: the parent's checkpoint at the selected step, or for
// "final" its latest checkpoint once the parent has succeeded. nullopt while it does not exist,
// or when the run has no parent.
absl::StatusOr<std::optional<CheckpointRecord>> ParentCheckpoint(
    Database& db, std::optional<int64_t> parent_run_id, const std::string& selector);

// Id of a metric name, nullopt when never logged.
absl::StatusOr<std::optional<int64_t>> FindMetricId(Database& db, const std::string& name);
absl::StatusOr<std::optional<MetricSummary>> LoadSummary(Database& db, int64_t run_id,
                                                         int64_t name_id, const std::string& name);

// The JSON path of a config key in runs.params_json: $."key" (quoted, so a '.' in a key is not a
// path step; keys never contain '"', see validate.cc).
std::string JsonPath(std::string_view key);
// A run's config keys as the JSON object stored in runs.params_json.
std::string ParamsJson(const std::map<std::string, std::string>& params);

// Checks key/value items (an environment record, a sweep's provenance): at most `most`, keys of
// 1 to 64 characters [a-z0-9_.], values one line of at most 1,024 bytes. `what` names an item
// in the error ("environment item").
absl::Status ValidateItems(const std::vector<std::pair<std::string, std::string>>& items,
                           const std::string& who, const std::string& what, size_t most);

// An attempt's environment record as stored (environments.items): one "key<TAB>value" line per
// item, in order; and back.
std::string EnvironmentText(const std::vector<std::pair<std::string, std::string>>& items);
std::vector<std::pair<std::string, std::string>> ParseEnvironmentText(std::string_view text);

// A RunFilter as SQL: a condition on the runs table aliased `r` (" AND ..." clauses, or empty)
// and the text values to bind, in order, to its placeholders. InvalidArgument for a filter on
// more than kMaxTags tags (the one place that limit is kept for every front end).
struct FilterSql {
  std::string conditions;
  std::vector<std::string> binds;
};
absl::StatusOr<FilterSql> BuildFilterSql(const RunFilter& filter);

}  // namespace cart::store::internal
