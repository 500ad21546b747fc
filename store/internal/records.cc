#include "store/internal/records.h"

#include <cstdlib>
#include <map>
#include <utility>

#include "common/status.h"
#include "common/strings.h"

namespace cart::store::internal {
namespace {

#define CART_RUN_SELECT                                                                        \
  "SELECT r.id, r.sweep_id, s.name, r.name, r.config_yaml, r.d, r.r, r.p, r.seed, r.steps, "   \
  "r.stored_params, r.effective_params, r.memory_estimate_bytes, r.status, r.priority, "       \
  "r.attempt, r.max_attempts, r.attempt_floor, r.cancel_requested, r.parent_run_id, "          \
  "r.parent_checkpoint, r.created_us, r.updated_us, r.oom_memory_bytes, r.params_json, "       \
  "r.min_memory_bytes, r.kind, r.eval_loops, r.work_hours, r.note, r.note_by, r.note_us, "     \
  "(SELECT json_group_array(json_array(t.tag, t.who, t.at_us)) FROM run_tags AS t "            \
  "WHERE t.run_id = r.id), r.diverged_step, r.diverged_loss, r.micro_batch_cap, "              \
  "(SELECT group_concat(dc, char(10)) FROM (SELECT ka.device_class AS dc FROM attempts AS ka " \
  "WHERE ka.run_id = r.id AND ka.device_class IS NOT NULL AND (ka.outcome = 'SUCCEEDED' OR "   \
  "(ka.outcome IS NULL AND ka.started_us IS NOT NULL) OR ka.kept_work = 1) "                   \
  "GROUP BY ka.device_class "                                                                  \
  "ORDER BY min(ka.attempt))), " CART_CHECKPOINT_CLASS_SQL                                     \
  ", "                                                                                         \
  "r.device_class_policy, r.seed_group "                                                       \
  "FROM runs AS r JOIN sweeps AS s ON s.id = r.sweep_id "

constexpr char kSelectRunById[] = CART_RUN_SELECT "WHERE r.id = ?";
constexpr char kSelectRunByName[] = CART_RUN_SELECT "WHERE s.name = ? AND r.name = ?";
constexpr char kSelectRunsWhere[] = CART_RUN_SELECT "WHERE 1 = 1";
constexpr char kSelectRunExists[] = "SELECT id FROM runs WHERE id = ?";
constexpr char kSelectRunStatus[] = "SELECT status FROM runs WHERE id = ?";
constexpr char kOrderByRunId[] = " ORDER BY r.id";
constexpr char kSelectJsonEach[] = "SELECT key, value FROM json_each(?) ORDER BY key";
// The tags column of CART_RUN_SELECT / CART_SWEEP_SELECT: a JSON array of [tag, who, at_us].
constexpr char kSelectTagsJson[] =
    "SELECT json_extract(value, '$[0]') AS tag, json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]') FROM json_each(?) ORDER BY tag";

#define CART_SWEEP_SELECT                                                                     \
  "SELECT id, name, client_request_id, spec_text, status, priority, created_by, created_us, " \
  "note, note_by, note_us, (SELECT json_group_array(json_array(t.tag, t.who, t.at_us)) "      \
  "FROM sweep_tags AS t WHERE t.sweep_id = sweeps.id), budget_device_hours "                  \
  "FROM sweeps "
constexpr char kSelectSweepByName[] = CART_SWEEP_SELECT "WHERE name = ?";
constexpr char kSelectSweepById[] = CART_SWEEP_SELECT "WHERE id = ?";
constexpr char kSelectSweepByRequest[] = CART_SWEEP_SELECT "WHERE client_request_id = ?";
constexpr char kSelectAllSweeps[] = CART_SWEEP_SELECT "ORDER BY id";
constexpr char kCountRunsOfEverySweep[] =
    "SELECT sweep_id, status, count(*) FROM runs GROUP BY sweep_id, status";
constexpr char kCountRunsBySweep[] =
    "SELECT status, count(*) FROM runs WHERE sweep_id = ? GROUP BY status ORDER BY status";

#define CART_CHECKPOINT_SELECT                                                        \
  "SELECT c.run_id, c.step, c.attempt, c.sha256, a.size_bytes, a.path, c.created_us " \
  "FROM checkpoints AS c JOIN artifacts AS a ON a.sha256 = c.sha256 "
constexpr char kSelectLatestCheckpoint[] =
    CART_CHECKPOINT_SELECT "WHERE c.run_id = ? ORDER BY c.step DESC LIMIT 1";
constexpr char kSelectCheckpointAt[] = CART_CHECKPOINT_SELECT "WHERE c.run_id = ? AND c.step = ?";
constexpr char kSelectCheckpoints[] = CART_CHECKPOINT_SELECT "WHERE c.run_id = ? ORDER BY c.step";

#define CART_ATTEMPT_SELECT                                                                \
  "SELECT run_id, attempt, worker_id, leased_us, lease_expires_us, started_us, ended_us, " \
  "outcome, reason, device_class, energy_j, energy_source FROM attempts "
constexpr char kSelectAttempt[] = CART_ATTEMPT_SELECT "WHERE run_id = ? AND attempt = ?";
constexpr char kSelectAttempts[] = CART_ATTEMPT_SELECT "WHERE run_id = ? ORDER BY attempt";
constexpr char kSelectAttemptEnvironments[] =
    "SELECT a.attempt, e.items FROM attempts a JOIN environments e ON e.id = a.environment_id "
    "WHERE a.run_id = ?";

constexpr char kSelectMetricId[] = "SELECT id FROM metric_names WHERE name = ?";
constexpr char kSelectSummary[] =
    "SELECT latest_step, latest_value, latest_wall_time_us, final_step, final_value "
    "FROM run_summaries WHERE run_id = ? AND name_id = ?";

// Fragments of BuildFilterSql; every value is a bound parameter.
constexpr char kFilterSweepsOpen[] =
    " AND r.sweep_id IN (SELECT sw.id FROM sweeps AS sw WHERE sw.name IN (";
constexpr char kFilterStatesOpen[] = " AND r.status IN (";
constexpr char kFilterKindsOpen[] = " AND r.kind IN (";
constexpr char kFilterClose[] = ")";
constexpr char kFilterSweepsClose[] = "))";
constexpr char kFilterParam[] = " AND json_extract(r.params_json, ?) = ?";
constexpr char kFilterTag[] =
    " AND EXISTS (SELECT 1 FROM run_tags AS ft WHERE ft.run_id = r.id AND ft.tag = ?)";

absl::StatusOr<RunState> StateColumn(const Statement& row, int col) {
  const std::string text = row.ColumnText(col);
  std::optional<RunState> state = ParseRunState(text);
  if (!state) return absl::InternalError(StrCat("unknown run state '", text, "' in database"));
  return *state;
}

absl::StatusOr<RunRecord> ReadRun(const Statement& row) {
  RunRecord run;
  run.id = row.ColumnInt64(0);
  run.sweep_id = row.ColumnInt64(1);
  run.sweep_name = row.ColumnText(2);
  run.name = row.ColumnText(3);
  run.config_yaml = row.ColumnText(4);
  run.d = row.ColumnInt64(5);
  run.r = row.ColumnOptionalInt64(6);
  run.p = row.ColumnOptionalInt64(7);
  run.seed = row.ColumnInt64(8);
  run.steps = row.ColumnInt64(9);
  run.stored_params = row.ColumnInt64(10);
  run.effective_params = row.ColumnInt64(11);
  run.memory_estimate_bytes = row.ColumnInt64(12);
  CART_ASSIGN_OR_RETURN(run.state, StateColumn(row, 13));
  run.priority = row.ColumnInt64(14);
  run.attempt = row.ColumnInt64(15);
  run.max_attempts = static_cast<int>(row.ColumnInt64(16));
  run.attempts_counted = run.attempt - row.ColumnInt64(17);
  run.cancel_requested = row.ColumnInt64(18) != 0;
  run.parent_run_id = row.ColumnOptionalInt64(19);
  run.parent_checkpoint = row.ColumnOptionalText(20).value_or("");
  run.created_us = row.ColumnInt64(21);
  run.updated_us = row.ColumnInt64(22);
  run.oom_memory_bytes = row.ColumnInt64(23);
  run.min_memory_bytes = row.ColumnInt64(25);
  run.kind = ParseJobKind(row.ColumnText(26)).value_or(JobKind::kTrain);
  run.work_hours = row.ColumnDouble(28);
  for (const std::string& part : Split(row.ColumnText(27), ',')) {
    if (std::optional<int64_t> r = ParseInt64(part)) run.eval_loops.push_back(static_cast<int>(*r));
  }
  run.note = Note{row.ColumnText(29), row.ColumnText(30), row.ColumnInt64(31)};
  if (std::optional<int64_t> step = row.ColumnOptionalInt64(33)) {
    // Stored as text ("nan", "inf", "-inf"): SQLite keeps no NaN in a REAL column.
    run.diverged = Divergence{*step, std::strtod(row.ColumnText(34).c_str(), nullptr)};
  }
  run.micro_batch_cap = row.ColumnInt64(35);
  for (const std::string& c : Split(row.ColumnText(36), '\n')) {
    if (!c.empty()) run.device_classes.push_back(c);
  }
  run.checkpoint_class = row.ColumnText(37);
  run.any_device_class = row.ColumnText(38) == "any";
  run.seed_group = row.ColumnText(39);
  return run;
}

// The tags of a run or sweep row from its tags column (`col`): no statement when it has none.
absl::StatusOr<std::vector<Tag>> ReadTags(Database& db, const Statement& row, int col) {
  std::vector<Tag> tags;
  const std::string json = row.ColumnText(col);
  if (json.empty() || json == "[]") return tags;
  CART_ASSIGN_OR_RETURN(auto each, db.Cached(kSelectTagsJson));
  each->BindText(1, json);
  CART_RETURN_IF_ERROR(each->ForEachRow([&](const Statement& cur) {
    tags.push_back(Tag{cur.ColumnText(0), cur.ColumnText(1), cur.ColumnInt64(2)});
  }));
  return tags;
}

// Fills run->params from the params_json column (index 24 of CART_RUN_SELECT) of `row`, and
// run->tags from its tags column (32).
absl::Status ReadParams(Database& db, const Statement& row, RunRecord* run) {
  CART_ASSIGN_OR_RETURN(run->tags, ReadTags(db, row, 32));
  CART_ASSIGN_OR_RETURN(auto each, db.Cached(kSelectJsonEach));
  each->BindText(1, row.ColumnText(24));
  return each->ForEachRow(
      [&](const Statement& cur) { run->params[cur.ColumnText(0)] = cur.ColumnText(1); });
}

// A sweep row of CART_SWEEP_SELECT, without its run counts.
SweepRecord ReadSweepFields(const Statement& row) {
  SweepRecord sweep;
  sweep.id = row.ColumnInt64(0);
  sweep.name = row.ColumnText(1);
  sweep.client_request_id = row.ColumnText(2);
  sweep.spec_text = row.ColumnText(3);
  sweep.cancelled = row.ColumnText(4) == "CANCELLED";
  sweep.priority = row.ColumnInt64(5);
  sweep.created_by = row.ColumnText(6);
  sweep.created_us = row.ColumnInt64(7);
  sweep.note = Note{row.ColumnText(8), row.ColumnText(9), row.ColumnInt64(10)};
  if (!row.ColumnIsNull(12)) sweep.budget_device_hours = row.ColumnDouble(12);
  return sweep;
}

absl::StatusOr<SweepRecord> ReadSweep(Database& db, const Statement& row) {
  SweepRecord sweep = ReadSweepFields(row);
  CART_ASSIGN_OR_RETURN(sweep.tags, ReadTags(db, row, 11));
  CART_ASSIGN_OR_RETURN(auto counts, db.Cached(kCountRunsBySweep));
  counts->BindAll(sweep.id);
  CART_RETURN_IF_ERROR(counts->ForEachRow([&](const auto& cur) -> absl::Status {
    CART_ASSIGN_OR_RETURN(RunState state, StateColumn(cur, 0));
    sweep.run_counts[state] = cur.ColumnInt64(1);
    return absl::OkStatus();
  }));
  return sweep;
}

// Runs a sweep SELECT bound to `arg`; nullopt when no row.
template <typename Arg>
absl::StatusOr<std::optional<SweepRecord>> SelectSweep(Database& db, const char* sql,
                                                       const Arg& arg) {
  std::optional<SweepRecord> out;
  {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(sql));
    select->BindAll(arg);
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) return out;
    // ReadSweep runs another statement; read this row fully first.
    CART_ASSIGN_OR_RETURN(out, ReadSweep(db, *select));
  }
  return out;
}

CheckpointRecord ReadCheckpoint(const Statement& row) {
  CheckpointRecord c;
  c.run_id = row.ColumnInt64(0);
  c.step = row.ColumnInt64(1);
  c.attempt = row.ColumnInt64(2);
  c.sha256 = row.ColumnText(3);
  c.size_bytes = row.ColumnInt64(4);
  c.path = row.ColumnText(5);
  c.created_us = row.ColumnInt64(6);
  return c;
}

absl::StatusOr<AttemptRecord> ReadAttempt(const Statement& row) {
  AttemptRecord a;
  a.run_id = row.ColumnInt64(0);
  a.attempt = row.ColumnInt64(1);
  a.worker_id = row.ColumnText(2);
  a.leased_us = row.ColumnInt64(3);
  a.lease_expires_us = row.ColumnInt64(4);
  a.started_us = row.ColumnOptionalInt64(5);
  a.ended_us = row.ColumnOptionalInt64(6);
  if (std::optional<std::string> outcome = row.ColumnOptionalText(7)) {
    a.outcome = ParseAttemptOutcome(*outcome);
    if (!a.outcome) {
      return absl::InternalError(StrCat("unknown attempt outcome '", *outcome, "' in database"));
    }
  }
  a.reason = row.ColumnOptionalText(8).value_or("");
  a.device_class = row.ColumnOptionalText(9).value_or("");
  if (!row.ColumnIsNull(10)) a.energy_j = row.ColumnDouble(10);
  a.energy_source = row.ColumnOptionalText(11).value_or("");
  return a;
}

}  // namespace

EventRecord ReadEvent(const Statement& row) {
  EventRecord e;
  e.id = row.ColumnInt64(0);
  e.run_id = row.ColumnOptionalInt64(1);
  e.sweep_id = row.ColumnOptionalInt64(2);
  e.from_state = row.ColumnOptionalText(3).value_or("");
  e.to_state = row.ColumnText(4);
  e.who = row.ColumnText(5);
  e.at_us = row.ColumnInt64(6);
  e.why = row.ColumnText(7);
  e.cause = ParseEventCause(row.ColumnOptionalText(8).value_or("")).value_or(EventCause::kNone);
  return e;
}

absl::Status RequireRun(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunExists));
  select->BindAll(run_id);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(StrCat("run ", run_id, " does not exist"));
  return absl::OkStatus();
}

absl::StatusOr<RunRecord> LoadRun(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunById));
  select->BindAll(run_id);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(StrCat("run ", run_id, " does not exist"));
  CART_ASSIGN_OR_RETURN(RunRecord run, ReadRun(*select));
  CART_RETURN_IF_ERROR(ReadParams(db, *select, &run));
  return run;
}

absl::StatusOr<RunRecord> LoadRunByName(Database& db, const std::string& sweep,
                                        const std::string& name) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunByName));
  select->BindAll(sweep, name);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(StrCat("run '", sweep, "/", name, "' does not exist"));
  CART_ASSIGN_OR_RETURN(RunRecord run, ReadRun(*select));
  CART_RETURN_IF_ERROR(ReadParams(db, *select, &run));
  return run;
}

absl::StatusOr<SweepRecord> LoadSweepByName(Database& db, const std::string& name) {
  CART_ASSIGN_OR_RETURN(auto sweep, SelectSweep(db, kSelectSweepByName, name));
  if (!sweep) return absl::NotFoundError(StrCat("sweep '", name, "' does not exist"));
  return *std::move(sweep);
}

absl::StatusOr<SweepRecord> LoadSweepById(Database& db, int64_t sweep_id) {
  CART_ASSIGN_OR_RETURN(auto sweep, SelectSweep(db, kSelectSweepById, sweep_id));
  if (!sweep) return absl::NotFoundError(StrCat("sweep ", sweep_id, " does not exist"));
  return *std::move(sweep);
}

absl::StatusOr<std::optional<SweepRecord>> FindSweepByRequestId(Database& db,
                                                                const std::string& request_id) {
  return SelectSweep(db, kSelectSweepByRequest, request_id);
}

absl::StatusOr<std::vector<SweepRecord>> LoadAllSweeps(Database& db) {
  // Two statements however many sweeps: the rows, then every sweep's counts in one grouped read.
  std::vector<SweepRecord> out;
  std::map<int64_t, size_t> at;  // sweep id -> index in out
  {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectAllSweeps));
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      out.push_back(ReadSweepFields(cur));
      CART_ASSIGN_OR_RETURN(out.back().tags, ReadTags(db, cur, 11));
      at[out.back().id] = out.size() - 1;
      return absl::OkStatus();
    }));
  }
  CART_ASSIGN_OR_RETURN(auto counts, db.Cached(kCountRunsOfEverySweep));
  CART_RETURN_IF_ERROR(counts->ForEachRow([&](const auto& cur) -> absl::Status {
    auto it = at.find(cur.ColumnInt64(0));
    if (it == at.end()) return absl::OkStatus();
    CART_ASSIGN_OR_RETURN(RunState state, StateColumn(cur, 1));
    out[it->second].run_counts[state] = cur.ColumnInt64(2);
    return absl::OkStatus();
  }));
  return out;
}

std::string JsonPath(std::string_view key) { return StrCat("$.\"", key, "\""); }

std::string ParamsJson(const std::map<std::string, std::string>& params) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t size = 2;
  for (const auto& [key, value] : params) size += key.size() + value.size() + 8;
  std::string out;
  out.reserve(size);
  auto quote = [&out](std::string_view text) {
    out += '"';
    size_t clean = 0;  // start of the run of characters that need no escape
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) continue;
      out.append(text.data() + clean, i - clean);
      clean = i + 1;
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else {
        out += "\\u00";
        out += kHex[(c >> 4) & 0xf];
        out += kHex[c & 0xf];
      }
    }
    out.append(text.data() + clean, text.size() - clean);
    out += '"';
  };
  out += '{';
  for (const auto& [key, value] : params) {
    if (out.size() > 1) out += ", ";
    quote(key);
    out += ": ";
    quote(value);
  }
  out += '}';
  return out;
}

absl::StatusOr<FilterSql> BuildFilterSql(const RunFilter& filter) {
  if (filter.tags.size() > kMaxTags) {
    return absl::InvalidArgumentError(
        StrCat("at most ", kMaxTags, " tags in a filter, not ", filter.tags.size()));
  }
  FilterSql out;
  auto placeholders = [](size_t n) {
    std::string text;
    for (size_t i = 0; i < n; ++i) text += i == 0 ? "?" : ", ?";
    return text;
  };
  if (!filter.sweeps.empty()) {
    out.conditions += kFilterSweepsOpen + placeholders(filter.sweeps.size()) + kFilterSweepsClose;
    for (const std::string& s : filter.sweeps) out.binds.push_back(s);
  }
  if (!filter.states.empty()) {
    out.conditions += kFilterStatesOpen + placeholders(filter.states.size()) + kFilterClose;
    for (RunState s : filter.states) out.binds.emplace_back(RunStateName(s));
  }
  if (!filter.kinds.empty()) {
    out.conditions += kFilterKindsOpen + placeholders(filter.kinds.size()) + kFilterClose;
    for (JobKind k : filter.kinds) out.binds.emplace_back(JobKindName(k));
  }
  for (const auto& [key, value] : filter.params) {
    out.conditions += kFilterParam;
    out.binds.push_back(JsonPath(key));
    out.binds.push_back(value);
  }
  for (const std::string& tag : filter.tags) {
    out.conditions += kFilterTag;
    out.binds.push_back(tag);
  }
  return out;
}

absl::StatusOr<std::vector<RunRecord>> LoadRuns(Database& db, const RunFilter& filter) {
  CART_ASSIGN_OR_RETURN(const FilterSql where, BuildFilterSql(filter));
  std::vector<RunRecord> runs;
  CART_ASSIGN_OR_RETURN(auto select,
                        db.Prepare(StrCat(kSelectRunsWhere, where.conditions, kOrderByRunId)));
  for (size_t i = 0; i < where.binds.size(); ++i) {
    select->BindText(static_cast<int>(i + 1), where.binds[i]);
  }
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
    CART_ASSIGN_OR_RETURN(RunRecord run, ReadRun(cur));
    CART_RETURN_IF_ERROR(ReadParams(db, cur, &run));
    runs.push_back(std::move(run));
    return absl::OkStatus();
  }));
  return runs;
}

absl::StatusOr<std::optional<CheckpointRecord>> LatestCheckpoint(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectLatestCheckpoint));
  select->BindAll(run_id);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return std::optional<CheckpointRecord>();
  return std::optional<CheckpointRecord>(ReadCheckpoint(*select));
}

absl::StatusOr<std::optional<CheckpointRecord>> CheckpointAt(Database& db, int64_t run_id,
                                                             int64_t step) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectCheckpointAt));
  select->BindAll(run_id, step);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return std::optional<CheckpointRecord>();
  return std::optional<CheckpointRecord>(ReadCheckpoint(*select));
}

absl::StatusOr<std::vector<CheckpointRecord>> LoadCheckpoints(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectCheckpoints));
  select->BindAll(run_id);
  std::vector<CheckpointRecord> out;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
    out.push_back(ReadCheckpoint(cur));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::optional<AttemptRecord>> LoadAttempt(Database& db, int64_t run_id,
                                                         int64_t attempt) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectAttempt));
  select->BindAll(run_id, attempt);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return std::optional<AttemptRecord>();
  CART_ASSIGN_OR_RETURN(AttemptRecord record, ReadAttempt(*select));
  return std::optional<AttemptRecord>(std::move(record));
}

absl::StatusOr<std::vector<AttemptRecord>> LoadAttempts(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectAttempts));
  select->BindAll(run_id);
  std::vector<AttemptRecord> out;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
    CART_ASSIGN_OR_RETURN(AttemptRecord record, ReadAttempt(cur));
    out.push_back(std::move(record));
    return absl::OkStatus();
  }));
  CART_ASSIGN_OR_RETURN(auto environments, db.Cached(kSelectAttemptEnvironments));
  environments->BindAll(run_id);
  CART_RETURN_IF_ERROR(environments->ForEachRow([&](const auto& cur) -> absl::Status {
    const int64_t attempt = cur.ColumnInt64(0);
    for (AttemptRecord& a : out) {
      if (a.attempt == attempt) a.environment = ParseEnvironmentText(cur.ColumnText(1));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::optional<CheckpointRecord>> ParentCheckpoint(
    Database& db, std::optional<int64_t> parent_run_id, const std::string& selector) {
  if (!parent_run_id) return std::optional<CheckpointRecord>();
  if (selector == "final") {
    CART_ASSIGN_OR_RETURN(auto status, db.Cached(kSelectRunStatus));
    status->BindAll(*parent_run_id);
    CART_ASSIGN_OR_RETURN(bool row, status->Step());
    if (!row || status->ColumnText(0) != RunStateName(RunState::kSucceeded)) {
      return std::optional<CheckpointRecord>();
    }
    return LatestCheckpoint(db, *parent_run_id);
  }
  std::optional<int64_t> step = ParseInt64(selector);
  if (!step) {
    return absl::InternalError(StrCat("malformed parent checkpoint selector '", selector,
                                      "' of a child of run ", *parent_run_id));
  }
  return CheckpointAt(db, *parent_run_id, *step);
}

absl::StatusOr<std::optional<int64_t>> FindMetricId(Database& db, const std::string& name) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectMetricId));
  select->BindAll(name);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return std::optional<int64_t>();
  return std::optional<int64_t>(select->ColumnInt64(0));
}

absl::StatusOr<std::optional<MetricSummary>> LoadSummary(Database& db, int64_t run_id,
                                                         int64_t name_id, const std::string& name) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSummary));
  select->BindAll(run_id, name_id);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return std::optional<MetricSummary>();
  MetricSummary s;
  s.name = name;
  s.latest_step = select->ColumnInt64(0);
  s.latest_value = select->ColumnDouble(1);
  s.latest_wall_time_us = select->ColumnInt64(2);
  s.final_step = select->ColumnOptionalInt64(3);
  if (s.final_step) s.final_value = select->ColumnDouble(4);
  return std::optional<MetricSummary>(std::move(s));
}

const char kRunSelectSql[] = CART_RUN_SELECT;

absl::StatusOr<RunRecord> ReadRunRow(Database& db, const Statement& row) {
  CART_ASSIGN_OR_RETURN(RunRecord run, ReadRun(row));
  CART_RETURN_IF_ERROR(ReadParams(db, row, &run));
  return run;
}

}  // namespace cart::store::internal
