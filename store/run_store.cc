// RunStore: opening, and every call that writes. Each public write method validates its input on
// the calling thread, then hands a closure to the writer thread (internal/writer.h); the closure
// reads what it needs, checks the state, and writes, all inside its savepoint.

#include "store/run_store.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/schema.h"
#include "store/internal/sql.h"
#include "store/internal/validate.h"
#include "store/internal/writer.h"

namespace cart::store {

using internal::Database;
using internal::WriteContext;

namespace {

constexpr char kInsertSweep[] =
    "INSERT INTO sweeps(name, client_request_id, spec_text, status, priority, created_by, "
    "created_us) VALUES(?, ?, ?, 'ACTIVE', ?, ?, ?)";
constexpr char kUpdateSweepStatus[] = "UPDATE sweeps SET status = ? WHERE id = ?";
constexpr char kSelectRunIdsOfSweep[] = "SELECT id FROM runs WHERE sweep_id = ? ORDER BY id";
constexpr char kInsertRun[] =
    "INSERT INTO runs(sweep_id, name, config_yaml, params_json, d, r, p, seed, steps, "
    "stored_params, effective_params, memory_estimate_bytes, min_memory_bytes, status, priority, "
    "attempt, max_attempts, attempt_floor, cancel_requested, parent_run_id, parent_checkpoint, "
    "created_us, updated_us, kind, eval_loops) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
    "0, ?, 0, 0, ?, ?, ?, ?, ?, ?)";
constexpr char kSetStepsParam[] =
    "UPDATE runs SET params_json = json_set(params_json, '$.\"steps\"', ?) WHERE id = ?";
constexpr char kInsertLogLine[] =
    "INSERT INTO run_logs(run_id, attempt, seq, wall_time_us, text) VALUES(?, ?, ?, ?, ?) "
    "ON CONFLICT(run_id, attempt, seq) DO NOTHING";
constexpr char kInsertEvent[] =
    "INSERT INTO events(run_id, sweep_id, from_state, to_state, who, at_us, why) "
    "VALUES(?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateRunState[] = "UPDATE runs SET status = ?, updated_us = ? WHERE id = ?";
constexpr char kSetAttempt[] = "UPDATE runs SET attempt = ? WHERE id = ?";
constexpr char kSetAttemptFloor[] = "UPDATE runs SET attempt_floor = ? WHERE id = ?";
constexpr char kSetCancelRequested[] = "UPDATE runs SET cancel_requested = ? WHERE id = ?";
constexpr char kSetStepsAndConfig[] = "UPDATE runs SET steps = ?, config_yaml = ? WHERE id = ?";
constexpr char kSelectRunFence[] =
    "SELECT status, attempt, cancel_requested FROM runs WHERE id = ?";
constexpr char kSelectBlockedChildren[] =
    "SELECT id, parent_checkpoint FROM runs WHERE parent_run_id = ? AND status = 'BLOCKED' "
    "ORDER BY id";

constexpr char kUpsertWorker[] =
    "INSERT INTO workers(id, device, memory_bytes, registered_us, last_seen_us) "
    "VALUES(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET device = excluded.device, "
    "memory_bytes = excluded.memory_bytes, last_seen_us = excluded.last_seen_us";
constexpr char kTouchWorker[] = "UPDATE workers SET last_seen_us = ? WHERE id = ?";
constexpr char kTouchWorkerOfAttempt[] =
    "UPDATE workers SET last_seen_us = ? "
    "WHERE id = (SELECT worker_id FROM attempts WHERE run_id = ? AND attempt = ?)";
constexpr char kSelectNextQueued[] =
    "SELECT id FROM runs WHERE status = 'QUEUED' AND min_memory_bytes <= ? "
    "AND oom_memory_bytes < ? ORDER BY priority DESC, created_us, id LIMIT 1";
constexpr char kRaiseOomFloor[] =
    "UPDATE runs SET oom_memory_bytes = max(oom_memory_bytes, ?) WHERE id = ?";
constexpr char kSelectAttemptFloor[] = "SELECT attempt_floor, max_attempts FROM runs WHERE id = ?";
constexpr char kInsertAttempt[] =
    "INSERT INTO attempts(run_id, attempt, worker_id, leased_us, lease_expires_us) "
    "VALUES(?, ?, ?, ?, ?)";
constexpr char kExtendLease[] =
    "UPDATE attempts SET lease_expires_us = ? WHERE run_id = ? AND attempt = ?";
constexpr char kStartAttempt[] =
    "UPDATE attempts SET started_us = ? WHERE run_id = ? AND attempt = ? AND started_us IS NULL";
constexpr char kEndAttempt[] =
    "UPDATE attempts SET ended_us = ?, outcome = ?, reason = ? WHERE run_id = ? AND attempt = ?";
constexpr char kSelectExpired[] =
    "SELECT a.run_id, a.attempt, a.worker_id, a.lease_expires_us, r.attempt_floor, "
    "r.max_attempts FROM attempts AS a JOIN runs AS r ON r.id = a.run_id AND r.attempt = a.attempt "
    "WHERE a.outcome IS NULL AND a.lease_expires_us <= ? AND r.status IN ('LEASED', 'RUNNING') "
    "ORDER BY a.run_id";

constexpr char kInsertMetricName[] =
    "INSERT INTO metric_names(name) VALUES(?) ON CONFLICT(name) DO NOTHING";
constexpr char kSelectMetricNameId[] = "SELECT id FROM metric_names WHERE name = ?";
// Multi-row inserts (internal::InsertRows) of metric points.
constexpr char kInsertMetricsHead[] =
    "INSERT INTO metrics(run_id, name_id, step, value, wall_time_us) VALUES ";
constexpr char kInsertMetricsTuple[] = "(?, ?, ?, ?, ?)";
constexpr char kInsertMetricsTail[] = " ON CONFLICT(run_id, name_id, step) DO NOTHING";

const internal::MultiRowInsertSql& InsertMetricsSql() {
  static const auto* const kSql = new internal::MultiRowInsertSql(
      kInsertMetricsHead, kInsertMetricsTuple, 5, kInsertMetricsTail, /*max_rows=*/250);
  return *kSql;
}

// Strictly greater: a resent point (same step) never changes the summary, just as it never
// changes the stored point.
constexpr char kUpsertSummary[] =
    "INSERT INTO run_summaries(run_id, name_id, latest_step, latest_value, latest_wall_time_us) "
    "VALUES(?, ?, ?, ?, ?) ON CONFLICT(run_id, name_id) DO UPDATE SET "
    "latest_step = excluded.latest_step, latest_value = excluded.latest_value, "
    "latest_wall_time_us = excluded.latest_wall_time_us "
    "WHERE excluded.latest_step > run_summaries.latest_step";
constexpr char kFinalizeSummaries[] =
    "UPDATE run_summaries SET final_step = latest_step, final_value = latest_value "
    "WHERE run_id = ?";

constexpr char kSelectArtifactSize[] = "SELECT size_bytes FROM artifacts WHERE sha256 = ?";
constexpr char kInsertArtifact[] =
    "INSERT INTO artifacts(sha256, size_bytes, path, created_us) VALUES(?, ?, ?, ?)";
constexpr char kUpsertCheckpoint[] =
    "INSERT INTO checkpoints(run_id, step, attempt, sha256, created_us) VALUES(?, ?, ?, ?, ?) "
    "ON CONFLICT(run_id, step) DO UPDATE SET attempt = excluded.attempt, "
    "sha256 = excluded.sha256, created_us = excluded.created_us";

// ---- Small write helpers (all run on the writer thread, inside a call's savepoint).

absl::Status InsertEvent(Database& db, std::optional<int64_t> run_id,
                         std::optional<int64_t> sweep_id, std::optional<std::string_view> from,
                         std::string_view to, const Audit& audit) {
  CART_ASSIGN_OR_RETURN(auto insert, db.Cached(kInsertEvent));
  insert->BindAll(run_id, sweep_id, from, to, audit.who, audit.at_us, audit.why);
  return insert->Run();
}

// The one way a run's state changes: checks the lifecycle, updates, writes the event row.
absl::Status ChangeState(Database& db, int64_t run_id, RunState from, RunState to,
                         const Audit& audit) {
  if (!IsLegalTransition(from, to)) {
    return absl::FailedPreconditionError(StrCat("run ", run_id, " is ", RunStateName(from),
                                                "; it cannot move to ", RunStateName(to)));
  }
  CART_ASSIGN_OR_RETURN(auto update, db.Cached(kUpdateRunState));
  update->BindAll(RunStateName(to), audit.at_us, run_id);
  CART_RETURN_IF_ERROR(update->Run());
  return InsertEvent(db, run_id, std::nullopt, RunStateName(from), RunStateName(to), audit);
}

template <typename... Args>
absl::Status Exec(Database& db, const char* sql, const Args&... args) {
  CART_ASSIGN_OR_RETURN(auto statement, db.Cached(sql));
  statement->BindAll(args...);
  return statement->Run();
}

struct Fence {
  RunState state;
  int64_t attempt;
  bool cancel_requested;
};

absl::StatusOr<Fence> LoadFence(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunFence));
  select->BindAll(run_id);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(StrCat("run ", run_id, " does not exist"));
  std::optional<RunState> state = ParseRunState(select->ColumnText(0));
  if (!state) return absl::InternalError(StrCat("run ", run_id, " has an unknown state"));
  return Fence{*state, select->ColumnInt64(1), select->ColumnInt64(2) != 0};
}

// Fencing: only the run's current attempt, while it holds the lease, may report.
absl::StatusOr<Fence> CheckFence(Database& db, int64_t run_id, int64_t attempt,
                                 std::string_view action) {
  CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, run_id));
  const bool holds_lease = fence.state == RunState::kLeased || fence.state == RunState::kRunning;
  if (fence.attempt != attempt || !holds_lease) {
    return absl::FailedPreconditionError(
        StrCat(action, " rejected: attempt ", attempt, " of run ", run_id, " is stale (run is ",
               RunStateName(fence.state), ", current attempt ", fence.attempt, ")"));
  }
  return fence;
}

absl::Status EndAttempt(Database& db, int64_t run_id, int64_t attempt, AttemptOutcome outcome,
                        int64_t at_us, std::string_view reason) {
  return Exec(db, kEndAttempt, at_us, AttemptOutcomeName(outcome), reason, run_id, attempt);
}

// Moves BLOCKED children of `parent_id` whose checkpoint selector `ready` accepts to QUEUED.
template <typename Ready>
absl::Status UnblockChildren(Database& db, int64_t parent_id, Ready ready, const std::string& why,
                             int64_t at_us) {
  std::vector<int64_t> ids;
  {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectBlockedChildren));
    select->BindAll(parent_id);
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      if (ready(cur.ColumnText(1))) ids.push_back(cur.ColumnInt64(0));
      return absl::OkStatus();
    }));
  }
  const Audit audit{at_us, "scheduler", why};
  for (int64_t id : ids) {
    CART_RETURN_IF_ERROR(ChangeState(db, id, RunState::kBlocked, RunState::kQueued, audit));
  }
  return absl::OkStatus();
}

// ---- Cancel and resume, shared by the run and sweep versions. Each returns whether it changed
// anything.

absl::StatusOr<bool> CancelOne(Database& db, int64_t run_id, const Audit& audit,
                               bool skip_finished) {
  CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, run_id));
  switch (fence.state) {
    case RunState::kQueued:
    case RunState::kBlocked:
      CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, RunState::kCancelled, audit));
      return true;
    case RunState::kLeased:
      // The worker has not started: its later reports fail the fence.
      CART_RETURN_IF_ERROR(EndAttempt(db, run_id, fence.attempt, AttemptOutcome::kCancelled,
                                      audit.at_us, audit.why));
      CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, RunState::kCancelled, audit));
      return true;
    case RunState::kRunning: {
      if (fence.cancel_requested) return false;
      CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 1, run_id));
      Audit request = audit;
      request.why = StrCat("cancel requested", audit.why.empty() ? "" : ": ", audit.why);
      CART_RETURN_IF_ERROR(InsertEvent(db, run_id, std::nullopt, RunStateName(fence.state),
                                       RunStateName(fence.state), request));
      return true;
    }
    case RunState::kSucceeded:
    case RunState::kFailed:
    case RunState::kCancelled:
      if (skip_finished) return false;
      return absl::FailedPreconditionError(
          StrCat("run ", run_id, " is ", RunStateName(fence.state), "; it cannot be cancelled"));
  }
  return absl::InternalError(StrCat("run ", run_id, " has an unknown state"));
}

absl::StatusOr<bool> ResumeOne(Database& db, int64_t run_id, const Audit& audit, bool skip_others) {
  CART_ASSIGN_OR_RETURN(RunRecord run, internal::LoadRun(db, run_id));
  if (run.state != RunState::kCancelled && run.state != RunState::kFailed) {
    if (skip_others) return false;
    return absl::FailedPreconditionError(StrCat("run ", run_id, " is ", RunStateName(run.state),
                                                "; only CANCELLED or FAILED runs can resume"));
  }
  CART_ASSIGN_OR_RETURN(auto parent_checkpoint,
                        internal::ParentCheckpoint(db, run.parent_run_id, run.parent_checkpoint));
  const bool blocked = run.parent_run_id.has_value() && !parent_checkpoint.has_value();
  CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, run.attempt, run_id));
  CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 0, run_id));
  CART_RETURN_IF_ERROR(
      ChangeState(db, run_id, run.state, blocked ? RunState::kBlocked : RunState::kQueued, audit));
  return true;
}

absl::StatusOr<std::vector<int64_t>> RunIdsOfSweep(Database& db, int64_t sweep_id) {
  std::vector<int64_t> ids;
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunIdsOfSweep));
  select->BindAll(sweep_id);
  CART_RETURN_IF_ERROR(select->ForEachRow(
      [&](const internal::Statement& row) { ids.push_back(row.ColumnInt64(0)); }));
  return ids;
}

// Cancels (cancel) or resumes every run of a sweep that can be, and marks the sweep. Returns how
// many runs changed.
absl::StatusOr<int64_t> ApplyToSweep(Database& db, const std::string& name, bool cancel,
                                     const Audit& audit) {
  CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
  CART_ASSIGN_OR_RETURN(std::vector<int64_t> ids, RunIdsOfSweep(db, sweep.id));
  int64_t changed = 0;
  for (int64_t id : ids) {
    CART_ASSIGN_OR_RETURN(bool did, cancel ? CancelOne(db, id, audit, /*skip_finished=*/true)
                                           : ResumeOne(db, id, audit, /*skip_others=*/true));
    changed += did ? 1 : 0;
  }
  if (sweep.cancelled != cancel) {
    const char* from = cancel ? "ACTIVE" : "CANCELLED";
    const char* to = cancel ? "CANCELLED" : "ACTIVE";
    CART_RETURN_IF_ERROR(Exec(db, kUpdateSweepStatus, to, sweep.id));
    CART_RETURN_IF_ERROR(InsertEvent(db, std::nullopt, sweep.id, from, to, audit));
  }
  return changed;
}

// ---- Metric batches.

// Id of a metric name, inserting it when new. Ids enter the writer's cache only once committed.
absl::StatusOr<int64_t> MetricId(WriteContext& ctx, const std::string& name) {
  auto it = ctx.committed_metric_ids().find(name);
  if (it != ctx.committed_metric_ids().end()) return it->second;
  CART_RETURN_IF_ERROR(Exec(ctx.db(), kInsertMetricName, name));
  CART_ASSIGN_OR_RETURN(auto select, ctx.db().Cached(kSelectMetricNameId));
  select->BindAll(name);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::InternalError(StrCat("metric name '", name, "' vanished"));
  const int64_t id = select->ColumnInt64(0);
  auto* cache = ctx.mutable_metric_ids();
  ctx.OnCommit([cache, name, id] { cache->emplace(name, id); });
  return id;
}

absl::StatusOr<int64_t> WriteMetrics(WriteContext& ctx, int64_t run_id, int64_t attempt,
                                     const std::vector<MetricPoint>& points) {
  Database& db = ctx.db();
  CART_RETURN_IF_ERROR(CheckFence(db, run_id, attempt, "metric batch").status());
  // Per name: the id and the first point at the highest step (the one INSERT keeps).
  struct Latest {
    int64_t name_id;
    const MetricPoint* point;
  };
  std::unordered_map<std::string_view, Latest> latest;
  std::vector<int64_t> name_ids;
  name_ids.reserve(points.size());
  int64_t max_step = -1;
  for (const MetricPoint& point : points) {
    auto it = latest.find(point.name);
    if (it == latest.end()) {
      CART_ASSIGN_OR_RETURN(int64_t id, MetricId(ctx, point.name));
      it = latest.emplace(point.name, Latest{id, &point}).first;
    } else if (point.step > it->second.point->step) {
      it->second.point = &point;
    }
    name_ids.push_back(it->second.name_id);
    max_step = std::max(max_step, point.step);
  }
  CART_RETURN_IF_ERROR(internal::InsertRows(db, InsertMetricsSql(), points.size(),
                                            [&](internal::Statement& insert, int first, size_t i) {
                                              const MetricPoint& p = points[i];
                                              insert.BindInt64(first, run_id);
                                              insert.BindInt64(first + 1, name_ids[i]);
                                              insert.BindInt64(first + 2, p.step);
                                              insert.BindDouble(first + 3, p.value);
                                              insert.BindInt64(first + 4, p.wall_time_us);
                                            }));
  CART_ASSIGN_OR_RETURN(auto summary, db.Cached(kUpsertSummary));
  for (const auto& [name, l] : latest) {
    summary->BindAll(run_id, l.name_id, l.point->step, l.point->value, l.point->wall_time_us);
    CART_RETURN_IF_ERROR(summary->Run());
    summary->Reset();
  }
  return max_step;
}

}  // namespace

RunStore::RunStore(StoreOptions options, std::unique_ptr<internal::Writer> writer,
                   std::unique_ptr<internal::ReaderPool> readers)
    : options_(std::move(options)), writer_(std::move(writer)), readers_(std::move(readers)) {}

RunStore::~RunStore() = default;

absl::StatusOr<std::unique_ptr<RunStore>> RunStore::Open(const StoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("store path is empty");
  if (options.lease_ttl_us <= 0) {
    return absl::InvalidArgumentError(
        StrCat("lease_ttl_us must be positive, got ", options.lease_ttl_us));
  }
  if (options.max_runs_per_sweep <= 0 || options.max_points_per_batch <= 0) {
    return absl::InvalidArgumentError("max_runs_per_sweep and max_points_per_batch must be > 0");
  }
  internal::DatabaseOptions write_options;
  write_options.busy_timeout_ms = options.busy_timeout_ms;
  write_options.cache_kib = options.writer_cache_kib;
  write_options.wal_autocheckpoint_pages = options.wal_checkpoint_pages;
  write_options.synchronous =
      options.synchronous_full ? internal::Synchronous::kFull : internal::Synchronous::kNormal;
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(options.path, write_options));
  CART_RETURN_IF_ERROR(internal::Migrate(*db));
  internal::DatabaseOptions read_options = write_options;
  read_options.create = false;
  read_options.query_only = true;
  read_options.cache_kib = options.reader_cache_kib;
  auto writer = std::make_unique<internal::Writer>(std::move(db), options.max_calls_per_commit);
  auto readers = std::make_unique<internal::ReaderPool>(options.path, read_options);
  return std::unique_ptr<RunStore>(new RunStore(options, std::move(writer), std::move(readers)));
}

absl::StatusOr<CreatedSweep> RunStore::CreateSweep(const NewSweep& sweep, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateNewSweep(sweep, options_.max_runs_per_sweep));
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<CreatedSweep>([&](WriteContext& ctx) -> absl::StatusOr<CreatedSweep> {
    Database& db = ctx.db();
    CreatedSweep out;
    CART_ASSIGN_OR_RETURN(auto existing,
                          internal::FindSweepByRequestId(db, sweep.client_request_id));
    if (existing) {
      if (existing->name != sweep.name || existing->spec_text != sweep.spec_text) {
        return absl::AlreadyExistsError(StrCat("client request id '", sweep.client_request_id,
                                               "' was used for sweep '", existing->name,
                                               "' with a different spec"));
      }
      CART_ASSIGN_OR_RETURN(out.run_ids, RunIdsOfSweep(db, existing->id));
      out.sweep = *std::move(existing);
      out.created = false;
      return out;
    }
    absl::StatusOr<SweepRecord> taken = internal::LoadSweepByName(db, sweep.name);
    if (taken.ok()) {
      return absl::AlreadyExistsError(
          StrCat("sweep '", sweep.name, "' already exists (id ", taken->id, ")"));
    }
    if (taken.status().code() != absl::StatusCode::kNotFound) return taken.status();

    CART_RETURN_IF_ERROR(Exec(db, kInsertSweep, sweep.name, sweep.client_request_id,
                              sweep.spec_text, sweep.priority, audit.who, audit.at_us));
    const int64_t sweep_id = db.LastInsertRowId();
    CART_RETURN_IF_ERROR(InsertEvent(db, std::nullopt, sweep_id, std::nullopt, "ACTIVE", audit));

    std::unordered_map<std::string_view, int64_t> ids_by_name;
    CART_ASSIGN_OR_RETURN(auto insert_run, db.Cached(kInsertRun));
    for (const NewRun& run : sweep.runs) {
      std::optional<int64_t> parent_id = run.parent_run_id;
      if (!run.parent_name.empty()) {
        auto it = ids_by_name.find(run.parent_name);
        if (it == ids_by_name.end()) {
          return absl::InvalidArgumentError(StrCat("run '", run.name, "' of sweep '", sweep.name,
                                                   "' names parent '", run.parent_name,
                                                   "', which is not an earlier run of the sweep"));
        }
        parent_id = it->second;
      } else if (parent_id) {
        const absl::Status exists = internal::RequireRun(db, *parent_id);
        if (absl::IsNotFound(exists)) {
          return absl::NotFoundError(StrCat("run '", run.name, "' of sweep '", sweep.name,
                                            "' names parent run ", *parent_id,
                                            ", which does not exist"));
        }
        CART_RETURN_IF_ERROR(exists);
      }
      RunState state = RunState::kQueued;
      if (parent_id) {
        CART_ASSIGN_OR_RETURN(auto ready,
                              internal::ParentCheckpoint(db, parent_id, run.parent_checkpoint));
        if (!ready) state = RunState::kBlocked;
      }
      const internal::RunColumns cols = internal::RunColumnsOf(run);
      insert_run->BindAll(
          sweep_id, run.name, run.config_yaml, internal::ParamsJson(run.params), cols.d, cols.r,
          cols.p, cols.seed, cols.steps, run.stored_params, run.effective_params,
          run.memory_estimate_bytes,
          run.min_memory_bytes > 0 ? run.min_memory_bytes : run.memory_estimate_bytes,
          RunStateName(state), run.priority.value_or(sweep.priority), run.max_attempts, parent_id,
          parent_id ? std::optional<std::string>(run.parent_checkpoint) : std::nullopt, audit.at_us,
          audit.at_us, std::string(JobKindName(run.kind)), StrJoin(run.eval_loops, ","));
      CART_RETURN_IF_ERROR(insert_run->Run());
      insert_run->Reset();
      const int64_t run_id = db.LastInsertRowId();
      CART_RETURN_IF_ERROR(
          InsertEvent(db, run_id, sweep_id, std::nullopt, RunStateName(state), audit));
      ids_by_name.emplace(run.name, run_id);
      out.run_ids.push_back(run_id);
    }
    CART_ASSIGN_OR_RETURN(out.sweep, internal::LoadSweepById(db, sweep_id));
    out.created = true;
    return out;
  });
}

absl::StatusOr<int64_t> RunStore::CancelSweep(const std::string& name, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<int64_t>(
      [&](WriteContext& ctx) { return ApplyToSweep(ctx.db(), name, /*cancel=*/true, audit); });
}

absl::StatusOr<int64_t> RunStore::ResumeSweep(const std::string& name, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<int64_t>(
      [&](WriteContext& ctx) { return ApplyToSweep(ctx.db(), name, /*cancel=*/false, audit); });
}

absl::Status RunStore::RegisterWorker(const std::string& worker_id, const std::string& device,
                                      int64_t memory_bytes, int64_t now_us) {
  CART_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  if (memory_bytes < 0) {
    return absl::InvalidArgumentError(
        StrCat("worker '", worker_id, "' reports negative memory ", memory_bytes));
  }
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        CART_RETURN_IF_ERROR(
            Exec(ctx.db(), kUpsertWorker, worker_id, device, memory_bytes, now_us, now_us));
        return true;
      })
      .status();
}

absl::StatusOr<std::optional<Claim>> RunStore::ClaimNextRun(const std::string& worker_id,
                                                            int64_t device_memory_bytes,
                                                            int64_t now_us) {
  CART_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  const int64_t ttl = options_.lease_ttl_us;
  return writer_->Run<std::optional<Claim>>([&](WriteContext& ctx)
                                                -> absl::StatusOr<std::optional<Claim>> {
    Database& db = ctx.db();
    CART_RETURN_IF_ERROR(Exec(db, kTouchWorker, now_us, worker_id));
    if (db.Changes() == 0) {
      return absl::NotFoundError(StrCat("worker '", worker_id, "' is not registered"));
    }
    int64_t run_id = 0;
    {
      CART_ASSIGN_OR_RETURN(auto next, db.Cached(kSelectNextQueued));
      next->BindAll(device_memory_bytes, device_memory_bytes);
      CART_ASSIGN_OR_RETURN(bool row, next->Step());
      if (!row) return std::optional<Claim>();
      run_id = next->ColumnInt64(0);
    }
    CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, run_id));
    const int64_t attempt = fence.attempt + 1;
    CART_RETURN_IF_ERROR(Exec(db, kSetAttempt, attempt, run_id));
    CART_RETURN_IF_ERROR(
        Exec(db, kInsertAttempt, run_id, attempt, worker_id, now_us, now_us + ttl));
    const Audit audit{now_us, StrCat("worker:", worker_id), StrCat("attempt ", attempt, " leased")};
    CART_RETURN_IF_ERROR(ChangeState(db, run_id, RunState::kQueued, RunState::kLeased, audit));
    Claim claim;
    CART_ASSIGN_OR_RETURN(claim.run, internal::LoadRun(db, run_id));
    claim.attempt = attempt;
    claim.lease_expires_us = now_us + ttl;
    CART_ASSIGN_OR_RETURN(claim.resume_from, internal::LatestCheckpoint(db, run_id));
    CART_ASSIGN_OR_RETURN(
        claim.parent_checkpoint,
        internal::ParentCheckpoint(db, claim.run.parent_run_id, claim.run.parent_checkpoint));
    return std::optional<Claim>(std::move(claim));
  });
}

absl::Status RunStore::MarkRunning(int64_t run_id, int64_t attempt, int64_t now_us) {
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        CART_ASSIGN_OR_RETURN(Fence fence, CheckFence(db, run_id, attempt, "start"));
        if (fence.state == RunState::kRunning) return true;
        CART_RETURN_IF_ERROR(Exec(db, kStartAttempt, now_us, run_id, attempt));
        const Audit audit{now_us, "scheduler", StrCat("attempt ", attempt, " started")};
        CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, RunState::kRunning, audit));
        return true;
      })
      .status();
}

absl::StatusOr<HeartbeatReply> RunStore::Heartbeat(int64_t run_id, int64_t attempt,
                                                   int64_t now_us) {
  const int64_t expires = now_us + options_.lease_ttl_us;
  return writer_->Run<HeartbeatReply>([&](WriteContext& ctx) -> absl::StatusOr<HeartbeatReply> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(Fence fence, CheckFence(db, run_id, attempt, "heartbeat"));
    CART_RETURN_IF_ERROR(Exec(db, kExtendLease, expires, run_id, attempt));
    CART_RETURN_IF_ERROR(Exec(db, kTouchWorkerOfAttempt, now_us, run_id, attempt));
    return HeartbeatReply{expires, fence.cancel_requested};
  });
}

absl::StatusOr<std::vector<ExpiredLease>> RunStore::ExpireLeases(int64_t now_us) {
  using Out = std::vector<ExpiredLease>;
  return writer_->Run<Out>([&](WriteContext& ctx) -> absl::StatusOr<Out> {
    Database& db = ctx.db();
    struct Row {
      ExpiredLease lease;
      int64_t expired_us;
      int64_t counted;
      int64_t max_attempts;
    };
    std::vector<Row> rows;
    {
      CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectExpired));
      select->BindAll(now_us);
      CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
        Row row;
        row.lease.run_id = cur.ColumnInt64(0);
        row.lease.attempt = cur.ColumnInt64(1);
        row.lease.worker_id = cur.ColumnText(2);
        row.expired_us = cur.ColumnInt64(3);
        row.counted = row.lease.attempt - cur.ColumnInt64(4);
        row.max_attempts = cur.ColumnInt64(5);
        rows.push_back(std::move(row));
        return absl::OkStatus();
      }));
    }
    Out out;
    for (Row& row : rows) {
      CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, row.lease.run_id));
      const bool spent = row.counted >= row.max_attempts;
      row.lease.new_state = spent ? RunState::kFailed : RunState::kQueued;
      const std::string why =
          StrCat("lease of attempt ", row.lease.attempt, " (worker ", row.lease.worker_id,
                 ") expired at ", row.expired_us,
                 spent ? StrCat("; ", row.counted, " of ", row.max_attempts, " attempts spent")
                       : std::string("; requeued"));
      CART_RETURN_IF_ERROR(
          EndAttempt(db, row.lease.run_id, row.lease.attempt, AttemptOutcome::kLost, now_us, why));
      CART_RETURN_IF_ERROR(ChangeState(db, row.lease.run_id, fence.state, row.lease.new_state,
                                       Audit{now_us, "scheduler", why}));
      out.push_back(std::move(row.lease));
    }
    return out;
  });
}

absl::StatusOr<RunRecord> RunStore::RecordAttemptOutcome(int64_t run_id, int64_t attempt,
                                                         AttemptOutcome outcome,
                                                         const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (outcome == AttemptOutcome::kLost || outcome == AttemptOutcome::kOutOfMemory) {
    return absl::InvalidArgumentError(
        StrCat("run ", run_id, ": outcome ", AttemptOutcomeName(outcome),
               outcome == AttemptOutcome::kLost ? " is set by lease expiry, not reported"
                                                : " is recorded by RetryAttempt"));
  }
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    Database& db = ctx.db();
    const std::string action = StrCat("outcome ", AttemptOutcomeName(outcome));
    CART_ASSIGN_OR_RETURN(Fence fence, CheckFence(db, run_id, attempt, action));
    RunState to = RunState::kQueued;
    switch (outcome) {
      case AttemptOutcome::kSucceeded:
        if (fence.state != RunState::kRunning) {
          return absl::FailedPreconditionError(StrCat("run ", run_id, " is ",
                                                      RunStateName(fence.state),
                                                      "; it can only succeed once RUNNING"));
        }
        to = RunState::kSucceeded;
        break;
      case AttemptOutcome::kFailed:
        to = RunState::kFailed;
        break;
      case AttemptOutcome::kCancelled:
        to = RunState::kCancelled;
        break;
      case AttemptOutcome::kDrained:
        // A handed-back lease does not count against max_attempts.
        CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, fence.attempt, run_id));
        to = RunState::kQueued;
        break;
      case AttemptOutcome::kOutOfMemory:
      case AttemptOutcome::kLost:
        return absl::InternalError("unreachable: refused above");
    }
    CART_RETURN_IF_ERROR(EndAttempt(db, run_id, attempt, outcome, audit.at_us, audit.why));
    CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 0, run_id));
    CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, to, audit));
    if (to == RunState::kSucceeded) {
      CART_RETURN_IF_ERROR(Exec(db, kFinalizeSummaries, run_id));
      CART_ASSIGN_OR_RETURN(auto checkpoint, internal::LatestCheckpoint(db, run_id));
      if (checkpoint) {
        CART_RETURN_IF_ERROR(UnblockChildren(
            db, run_id, [](const std::string& selector) { return selector == "final"; },
            StrCat("parent run ", run_id, " succeeded with a final checkpoint at step ",
                   checkpoint->step),
            audit.at_us));
      }
    }
    return internal::LoadRun(db, run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::RetryAttempt(int64_t run_id, int64_t attempt,
                                                 const RetryRequest& retry, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (retry.oom_memory_bytes < 0) {
    return absl::InvalidArgumentError(
        StrCat("run ", run_id, ": negative OOM memory ", retry.oom_memory_bytes));
  }
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(Fence fence, CheckFence(db, run_id, attempt, "outcome FAILED"));
    int64_t floor = 0;
    int64_t max_attempts = 0;
    {
      CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectAttemptFloor));
      select->BindAll(run_id);
      CART_ASSIGN_OR_RETURN(bool row, select->Step());
      if (!row) return absl::NotFoundError(StrCat("run ", run_id, " does not exist"));
      floor = select->ColumnInt64(0);
      max_attempts = select->ColumnInt64(1);
    }
    // Raising the floor by one forgives exactly this attempt, keeping earlier ones counted.
    if (!retry.counted) {
      floor += 1;
      CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, floor, run_id));
    }
    if (retry.oom_memory_bytes > 0) {
      CART_RETURN_IF_ERROR(Exec(db, kRaiseOomFloor, retry.oom_memory_bytes, run_id));
    }
    const int64_t counted = fence.attempt - floor;
    RunState to = RunState::kQueued;
    std::string why = audit.why;
    if (fence.cancel_requested) {
      to = RunState::kCancelled;
      why = StrCat(why, "; cancel was requested, not retried");
    } else if (counted >= max_attempts) {
      to = RunState::kFailed;
      why = StrCat(why, "; ", counted, " of ", max_attempts, " attempts spent");
    } else {
      why = StrCat(why, "; requeued (", counted, " of ", max_attempts, " attempts spent)");
    }
    CART_RETURN_IF_ERROR(EndAttempt(
        db, run_id, attempt,
        retry.oom_memory_bytes > 0 ? AttemptOutcome::kOutOfMemory : AttemptOutcome::kFailed,
        audit.at_us, audit.why));
    CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 0, run_id));
    CART_RETURN_IF_ERROR(
        ChangeState(db, run_id, fence.state, to, Audit{audit.at_us, audit.who, why}));
    return internal::LoadRun(db, run_id);
  });
}

absl::StatusOr<int64_t> RunStore::AppendMetrics(int64_t run_id, int64_t attempt,
                                                std::vector<MetricPoint> points) {
  return AppendMetricsAsync(run_id, attempt, std::move(points)).get();
}

std::future<absl::StatusOr<int64_t>> RunStore::AppendMetricsAsync(int64_t run_id, int64_t attempt,
                                                                  std::vector<MetricPoint> points) {
  if (absl::Status valid =
          internal::ValidateMetricBatch(run_id, points, options_.max_points_per_batch);
      !valid.ok()) {
    std::promise<absl::StatusOr<int64_t>> failed;
    failed.set_value(valid);
    return failed.get_future();
  }
  return writer_->Submit<int64_t>([run_id, attempt, points = std::move(points)](WriteContext& ctx) {
    return WriteMetrics(ctx, run_id, attempt, points);
  });
}

namespace {

// `text` cut to at most `max_bytes` on a UTF-8 character boundary, with "…" when cut.
std::string CutLine(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes - 3;  // room for "…" (3 bytes)
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "…";
}

}  // namespace

absl::StatusOr<int64_t> RunStore::AppendLog(int64_t run_id, int64_t attempt,
                                            const std::vector<LogLine>& lines) {
  for (const LogLine& line : lines) {
    if (line.seq < 0) {
      return absl::InvalidArgumentError(
          StrCat("log line of run ", run_id, " has a negative seq ", line.seq));
    }
  }
  return writer_->Run<int64_t>([&](WriteContext& ctx) -> absl::StatusOr<int64_t> {
    Database& db = ctx.db();
    CART_RETURN_IF_ERROR(CheckFence(db, run_id, attempt, "log line").status());
    int64_t added = 0;
    const int64_t limit = options_.max_log_lines_per_attempt;
    for (const LogLine& line : lines) {
      if (line.seq > limit + 1) continue;  // past the limit: acknowledged, not stored
      CART_ASSIGN_OR_RETURN(auto insert, db.Cached(kInsertLogLine));
      if (line.seq == limit + 1) {
        insert->BindAll(run_id, attempt, line.seq, line.wall_time_us,
                        StrCat("[cartd] this attempt logged more than ", limit,
                               " lines; later lines are not stored (max_log_lines_per_attempt)"));
      } else if (line.seq > 0) {
        insert->BindAll(run_id, attempt, line.seq, line.wall_time_us,
                        CutLine(line.text, kMaxLogLineBytes));
      } else {
        insert->BindAll(run_id, attempt, std::nullopt, line.wall_time_us,
                        CutLine(line.text, kMaxLogLineBytes));
      }
      CART_RETURN_IF_ERROR(insert->Run());
      added += db.Changes();
    }
    return added;
  });
}

absl::StatusOr<CheckpointRecord> RunStore::RecordCheckpoint(int64_t run_id, int64_t attempt,
                                                            const NewCheckpoint& checkpoint,
                                                            int64_t now_us) {
  CART_RETURN_IF_ERROR(internal::ValidateCheckpoint(run_id, checkpoint));
  return writer_->Run<CheckpointRecord>([&](WriteContext& ctx) -> absl::StatusOr<CheckpointRecord> {
    Database& db = ctx.db();
    CART_RETURN_IF_ERROR(CheckFence(db, run_id, attempt, "checkpoint").status());
    std::optional<int64_t> known_size;
    {
      CART_ASSIGN_OR_RETURN(auto size, db.Cached(kSelectArtifactSize));
      size->BindAll(checkpoint.sha256);
      CART_ASSIGN_OR_RETURN(bool known, size->Step());
      if (known) known_size = size->ColumnInt64(0);
    }
    if (known_size && *known_size != checkpoint.size_bytes) {
      return absl::FailedPreconditionError(StrCat("artifact ", checkpoint.sha256,
                                                  " is recorded with size ", *known_size, ", not ",
                                                  checkpoint.size_bytes));
    }
    if (!known_size) {
      CART_RETURN_IF_ERROR(Exec(db, kInsertArtifact, checkpoint.sha256, checkpoint.size_bytes,
                                checkpoint.path, now_us));
    }
    CART_RETURN_IF_ERROR(
        Exec(db, kUpsertCheckpoint, run_id, checkpoint.step, attempt, checkpoint.sha256, now_us));
    const std::string step_text = StrCat(checkpoint.step);
    CART_RETURN_IF_ERROR(UnblockChildren(
        db, run_id, [&](const std::string& selector) { return selector == step_text; },
        StrCat("parent run ", run_id, " recorded its checkpoint at step ", step_text), now_us));
    CART_ASSIGN_OR_RETURN(auto stored, internal::CheckpointAt(db, run_id, checkpoint.step));
    if (!stored) return absl::InternalError("checkpoint vanished after insert");
    return *std::move(stored);
  });
}

absl::StatusOr<RunRecord> RunStore::CancelRun(int64_t run_id, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(CancelOne(ctx.db(), run_id, audit, /*skip_finished=*/false).status());
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::ResumeRun(int64_t run_id, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(ResumeOne(ctx.db(), run_id, audit, /*skip_others=*/false).status());
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::ExtendRun(int64_t run_id, int64_t new_total_steps,
                                              const std::string& new_config_yaml,
                                              const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (new_config_yaml.empty()) {
    return absl::InvalidArgumentError(StrCat("extend of run ", run_id, ": config is empty"));
  }
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(RunRecord run, internal::LoadRun(db, run_id));
    if (run.state != RunState::kSucceeded) {
      return absl::FailedPreconditionError(StrCat("run ", run_id, " is ", RunStateName(run.state),
                                                  "; only SUCCEEDED runs can be extended"));
    }
    if (new_total_steps <= run.steps) {
      return absl::FailedPreconditionError(StrCat("run ", run_id, " already trains for ", run.steps,
                                                  " steps; extending to ", new_total_steps,
                                                  " would add none"));
    }
    CART_RETURN_IF_ERROR(Exec(db, kSetStepsAndConfig, new_total_steps, new_config_yaml, run_id));
    CART_RETURN_IF_ERROR(Exec(db, kSetStepsParam, StrCat(new_total_steps), run_id));
    CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, run.attempt, run_id));
    Audit extend = audit;
    extend.why = StrCat("extend from ", run.steps, " to ", new_total_steps, " steps",
                        audit.why.empty() ? "" : ": ", audit.why);
    CART_RETURN_IF_ERROR(ChangeState(db, run_id, run.state, RunState::kQueued, extend));
    return internal::LoadRun(db, run_id);
  });
}

}  // namespace cart::store
