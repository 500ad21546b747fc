// RunStore's writes: workers, leases and how attempts end. Each public method validates its input
// on the calling thread, then hands a closure to the writer thread (internal/writer.h); the closure
// reads what it needs, checks the state, and writes, all inside its savepoint.
#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/sql.h"
#include "store/internal/validate.h"
#include "store/internal/writer.h"
#include "store/internal/writes.h"
#include "store/run_store.h"

namespace cart::store {

using internal::ChangeState;
using internal::CheckFence;
using internal::Database;
using internal::EndAttempt;
using internal::Exec;
using internal::Fence;
using internal::kSetAttemptFloor;
using internal::kSetCancelRequested;
using internal::LoadFence;
using internal::Statement;
using internal::UnblockChildren;
using internal::WriteContext;

namespace {

constexpr char kSetDiverged[] = "UPDATE runs SET diverged_step = ?, diverged_loss = ? WHERE id = ?";

constexpr char kSetAttempt[] = "UPDATE runs SET attempt = ? WHERE id = ?";
constexpr char kUpsertWorker[] =
    "INSERT INTO workers(id, device, memory_bytes, registered_us, last_seen_us) "
    "VALUES(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET device = excluded.device, "
    "memory_bytes = excluded.memory_bytes, last_seen_us = excluded.last_seen_us";
constexpr char kTouchWorker[] = "UPDATE workers SET last_seen_us = ? WHERE id = ?";
constexpr char kTouchWorkerOfAttempt[] =
    "UPDATE workers SET last_seen_us = ? "
    "WHERE id = (SELECT worker_id FROM attempts WHERE run_id = ? AND attempt = ?)";
// A run whose latest checkpoint pins it to a device class goes only to a worker of that class
// (docs/architecture.md "Device classes"); ?3 is the asking worker's id.
#define CART_PIN_ALLOWS_WORKER                                            \
  "(r.device_class_policy = 'any' OR coalesce(" CART_CHECKPOINT_CLASS_SQL \
  ", "                                                                    \
  "(SELECT w.device FROM workers AS w WHERE w.id = ?3)) = "               \
  "(SELECT w.device FROM workers AS w WHERE w.id = ?3))"
constexpr char kSelectNextQueued[] =
    "SELECT r.id FROM runs AS r WHERE r.status = 'QUEUED' AND r.min_memory_bytes <= ?1 "
    "AND r.oom_memory_bytes < ?2 AND " CART_PIN_ALLOWS_WORKER
    " ORDER BY r.priority DESC, r.created_us, r.id LIMIT 1";
// Placement's view of queued runs: the remaining work needs the latest checkpoint's step.
#define CART_PLACEABLE_SELECT                                                                  \
  "SELECT r.id, r.priority, r.min_memory_bytes, r.oom_memory_bytes, r.work_hours, r.steps, "   \
  "coalesce((SELECT max(c.step) FROM checkpoints AS c WHERE c.run_id = r.id), 0), "            \
  "r.created_us, s.created_by, r.sweep_id, CASE WHEN r.device_class_policy = 'any' THEN NULL " \
  "ELSE " CART_CHECKPOINT_CLASS_SQL                                                            \
  " END, r.seed_group "                                                                        \
  "FROM runs AS r JOIN sweeps AS s ON s.id = r.sweep_id WHERE r.status = 'QUEUED' "
constexpr char kSelectQueuedWork[] = CART_PLACEABLE_SELECT
    "AND r.min_memory_bytes <= ?2 AND r.oom_memory_bytes < ?2 "
    "ORDER BY r.priority DESC, r.work_hours = 0, r.work_hours DESC, r.created_us, r.id LIMIT ?1";
constexpr char kSelectUsage[] =
    "SELECT s.created_by, a.started_us, coalesce(a.ended_us, ?1) FROM attempts AS a "
    "JOIN runs AS r ON r.id = a.run_id JOIN sweeps AS s ON s.id = r.sweep_id "
    "WHERE a.started_us IS NOT NULL AND coalesce(a.ended_us, ?1) >= ?2 "
    "UNION ALL SELECT owner, started_us, ended_us FROM deleted_usage WHERE ended_us >= ?2";
constexpr char kSetAttemptEnergy[] =
    "UPDATE attempts SET energy_j = max(coalesce(energy_j, 0), ?1), energy_source = ?2 "
    "WHERE run_id = ?3 AND attempt = ?4";
constexpr char kSetLastPreempted[] = "UPDATE runs SET last_preempted_us = ?2 WHERE id = ?1";
constexpr char kSelectRecentPreemptions[] =
    "SELECT id, last_preempted_us FROM runs WHERE last_preempted_us >= ?";
constexpr char kSelectQueuedFit[] =
    "SELECT 1 FROM runs AS r WHERE r.id = ?4 AND r.status = 'QUEUED' AND r.min_memory_bytes <= ?1 "
    "AND r.oom_memory_bytes < ?2 AND " CART_PIN_ALLOWS_WORKER;
// Each balanced seed group's runs by device class (RunStore::SeedGroupClasses): a run counts on
// the class of its latest attempt once leased, or while queued on the class its checkpoint pins
// it to; only the groups that have queued runs.
constexpr char kSelectSeedGroupClasses[] =
    "SELECT r.sweep_id, r.seed_group, CASE WHEN r.status = 'QUEUED' THEN "
    "CASE WHEN r.device_class_policy = 'any' THEN NULL ELSE " CART_CHECKPOINT_CLASS_SQL
    " END "
    "ELSE (SELECT a.device_class FROM attempts AS a WHERE a.run_id = r.id AND a.attempt = "
    "r.attempt) END AS class, count(*) FROM runs AS r "
    "WHERE r.seed_group != '' AND (r.sweep_id, r.seed_group) IN (SELECT q.sweep_id, q.seed_group "
    "FROM runs AS q WHERE q.status = 'QUEUED' AND q.seed_group != '') AND r.attempt > 0 "
    "GROUP BY 1, 2, 3 HAVING class IS NOT NULL";
constexpr char kRaiseOomFloor[] =
    "UPDATE runs SET oom_memory_bytes = max(oom_memory_bytes, ?) WHERE id = ?";
constexpr char kLowerMicroBatchCap[] =
    "UPDATE runs SET micro_batch_cap = CASE WHEN micro_batch_cap = 0 THEN ?1 "
    "ELSE min(micro_batch_cap, ?1) END WHERE id = ?2";
constexpr char kSelectAttemptFloor[] = "SELECT attempt_floor, max_attempts FROM runs WHERE id = ?";
constexpr char kInsertAttempt[] =
    "INSERT INTO attempts(run_id, attempt, worker_id, leased_us, lease_expires_us, device_class) "
    "VALUES(?1, ?2, ?3, ?4, ?5, (SELECT w.device FROM workers AS w WHERE w.id = ?3))";
constexpr char kExtendLease[] =
    "UPDATE attempts SET lease_expires_us = ? WHERE run_id = ? AND attempt = ?";
constexpr char kStartAttempt[] =
    "UPDATE attempts SET started_us = ? WHERE run_id = ? AND attempt = ? AND started_us IS NULL";
constexpr char kSelectExpired[] =
    "SELECT a.run_id, a.attempt, a.worker_id, a.lease_expires_us, r.attempt_floor, "
    "r.max_attempts FROM attempts AS a JOIN runs AS r ON r.id = a.run_id AND r.attempt = a.attempt "
    "WHERE a.outcome IS NULL AND a.lease_expires_us <= ? AND r.status IN ('LEASED', 'RUNNING') "
    "ORDER BY a.run_id";
constexpr char kFinalizeSummaries[] =
    "UPDATE run_summaries SET final_step = latest_step, final_value = latest_value "
    "WHERE run_id = ?";

}  // namespace

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

namespace {

// Leases `run_id` (QUEUED) to `worker_id` under a new attempt: the claim both ClaimNextRun and
// ClaimRun hand out.
absl::StatusOr<Claim> LeaseRun(Database& db, const std::string& worker_id, int64_t run_id,
                               int64_t now_us, int64_t ttl) {
  CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, run_id));
  const int64_t attempt = fence.attempt + 1;
  CART_RETURN_IF_ERROR(Exec(db, kSetAttempt, attempt, run_id));
  CART_RETURN_IF_ERROR(Exec(db, kInsertAttempt, run_id, attempt, worker_id, now_us, now_us + ttl));
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
  CART_ASSIGN_OR_RETURN(claim.data, internal::LoadRunData(db, run_id));
  return claim;
}

// Marks the worker seen; NotFound when it never registered.
absl::Status TouchRegistered(Database& db, const std::string& worker_id, int64_t now_us) {
  CART_RETURN_IF_ERROR(Exec(db, kTouchWorker, now_us, worker_id));
  if (db.Changes() == 0) {
    return absl::NotFoundError(StrCat("worker '", worker_id, "' is not registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PlaceableRun>> ReadPlaceable(Statement& select) {
  std::vector<PlaceableRun> out;
  CART_RETURN_IF_ERROR(select.ForEachRow([&](const Statement& row) {
    PlaceableRun r;
    r.id = row.ColumnInt64(0);
    r.priority = row.ColumnInt64(1);
    r.min_memory_bytes = row.ColumnInt64(2);
    r.oom_memory_bytes = row.ColumnInt64(3);
    r.work_hours = row.ColumnDouble(4);
    r.steps = row.ColumnInt64(5);
    r.done_steps = row.ColumnInt64(6);
    r.created_us = row.ColumnInt64(7);
    r.owner = row.ColumnText(8);
    r.sweep_id = row.ColumnInt64(9);
    r.device_class_pin = row.ColumnText(10);
    r.seed_group = row.ColumnText(11);
    out.push_back(std::move(r));
  }));
  return out;
}

}  // namespace

absl::StatusOr<std::optional<Claim>> RunStore::ClaimPicked(
    const std::string& worker_id, int64_t now_us,
    const std::function<absl::StatusOr<std::optional<int64_t>>(Database&)>& pick) {
  CART_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  const int64_t ttl = options_.lease_ttl_us;
  return writer_->Run<std::optional<Claim>>(
      [&](WriteContext& ctx) -> absl::StatusOr<std::optional<Claim>> {
        Database& db = ctx.db();
        CART_RETURN_IF_ERROR(TouchRegistered(db, worker_id, now_us));
        CART_ASSIGN_OR_RETURN(std::optional<int64_t> run_id, pick(db));
        if (!run_id) return std::optional<Claim>();
        CART_ASSIGN_OR_RETURN(Claim claim, LeaseRun(db, worker_id, *run_id, now_us, ttl));
        return std::optional<Claim>(std::move(claim));
      });
}

absl::StatusOr<std::optional<Claim>> RunStore::ClaimNextRun(const std::string& worker_id,
                                                            int64_t device_memory_bytes,
                                                            int64_t now_us) {
  return ClaimPicked(worker_id, now_us,
                     [&](Database& db) -> absl::StatusOr<std::optional<int64_t>> {
                       CART_ASSIGN_OR_RETURN(auto next, db.Cached(kSelectNextQueued));
                       next->BindAll(device_memory_bytes, device_memory_bytes, worker_id);
                       CART_ASSIGN_OR_RETURN(bool row, next->Step());
                       if (!row) return std::optional<int64_t>();
                       return std::optional<int64_t>(next->ColumnInt64(0));
                     });
}

absl::StatusOr<std::optional<Claim>> RunStore::ClaimRun(const std::string& worker_id,
                                                        int64_t run_id, int64_t device_memory_bytes,
                                                        int64_t now_us) {
  return ClaimPicked(worker_id, now_us,
                     [&](Database& db) -> absl::StatusOr<std::optional<int64_t>> {
                       CART_ASSIGN_OR_RETURN(auto fits, db.Cached(kSelectQueuedFit));
                       fits->BindAll(device_memory_bytes, device_memory_bytes, worker_id, run_id);
                       CART_ASSIGN_OR_RETURN(bool row, fits->Step());
                       if (!row) return std::optional<int64_t>();
                       return std::optional<int64_t>(run_id);
                     });
}

absl::StatusOr<std::map<std::string, double>> RunStore::DecayedUsage(int64_t now_us,
                                                                     int64_t half_life_us) {
  using Out = std::map<std::string, double>;
  if (half_life_us <= 0) return Out();
  return internal::ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectUsage));
    select->BindAll(now_us, now_us - 10 * half_life_us);
    Out usage;
    // An hour used at age a weighs 2^(-a / h); over an attempt from age a1 (its end) to a0 (its
    // start) that integrates to h / ln 2 * (2^(-a1 / h) - 2^(-a0 / h)).
    const double h = static_cast<double>(half_life_us);
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& row) {
      const double start_age = static_cast<double>(now_us - row.ColumnInt64(1));
      const double end_age = std::max(0.0, static_cast<double>(now_us - row.ColumnInt64(2)));
      if (start_age <= end_age) return;
      const double us = h / std::log(2.0) * (std::exp2(-end_age / h) - std::exp2(-start_age / h));
      usage[row.ColumnText(0)] += us / 3.6e9;
    }));
    return usage;
  });
}

absl::Status RunStore::RecordPreemption(int64_t run_id, int64_t now_us) {
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        CART_RETURN_IF_ERROR(Exec(ctx.db(), kSetLastPreempted, run_id, now_us));
        return true;
      })
      .status();
}

absl::StatusOr<std::map<int64_t, int64_t>> RunStore::RecentPreemptions(int64_t since_us) {
  using Out = std::map<int64_t, int64_t>;
  return internal::ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRecentPreemptions));
    select->BindAll(since_us);
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow(
        [&](const Statement& row) { out[row.ColumnInt64(0)] = row.ColumnInt64(1); }));
    return out;
  });
}

absl::StatusOr<std::vector<PlaceableRun>> RunStore::ListQueuedWork(int64_t limit,
                                                                   int64_t max_memory_bytes) {
  using Out = std::vector<PlaceableRun>;
  return internal::ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectQueuedWork));
    select->BindAll(limit, max_memory_bytes);
    return ReadPlaceable(*select);
  });
}

absl::StatusOr<SeedGroupClasses> RunStore::ListSeedGroupClasses() {
  return internal::ReadSnapshot<SeedGroupClasses>(
      *readers_, [&](Database& db) -> absl::StatusOr<SeedGroupClasses> {
        CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSeedGroupClasses));
        SeedGroupClasses out;
        CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& row) {
          out[{row.ColumnInt64(0), row.ColumnText(1)}][row.ColumnText(2)] = row.ColumnInt64(3);
        }));
        return out;
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
                                       Audit{now_us, "scheduler", why, EventCause::kLeaseExpired}));
      out.push_back(std::move(row.lease));
    }
    return out;
  });
}

absl::StatusOr<RunRecord> RunStore::RecordAttemptOutcome(int64_t run_id, int64_t attempt,
                                                         AttemptOutcome outcome, const Audit& audit,
                                                         std::optional<Divergence> diverged) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (diverged && outcome != AttemptOutcome::kFailed) {
    return absl::InvalidArgumentError(StrCat("run ", run_id,
                                             ": a divergence ends an attempt FAILED, not ",
                                             AttemptOutcomeName(outcome)));
  }
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
    Audit told = audit;
    if (diverged) told.cause = EventCause::kDiverged;
    CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, to, told));
    if (diverged) {
      CART_RETURN_IF_ERROR(Exec(db, kSetDiverged, diverged->step, StrCat(diverged->loss), run_id));
    }
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

absl::Status RunStore::RecordEnergy(int64_t run_id, int64_t attempt, double joules,
                                    const std::string& source) {
  if (!std::isfinite(joules) || joules < 0) {
    return absl::InvalidArgumentError(
        StrCat("run ", run_id, " attempt ", attempt, ": energy ", joules, " J is not >= 0"));
  }
  if (source != "nvml" && source != "rapl") {
    return absl::InvalidArgumentError(StrCat("run ", run_id, " attempt ", attempt,
                                             ": energy source '", source.substr(0, 32),
                                             "' is not nvml or rapl"));
  }
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        CART_RETURN_IF_ERROR(CheckFence(db, run_id, attempt, "energy").status());
        CART_RETURN_IF_ERROR(Exec(db, kSetAttemptEnergy, joules, source, run_id, attempt));
        return true;
      })
      .status();
}

absl::StatusOr<RunRecord> RunStore::RetryAttempt(int64_t run_id, int64_t attempt,
                                                 const RetryRequest& retry, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (retry.oom_memory_bytes < 0 || retry.micro_batch_cap < 0) {
    return absl::InvalidArgumentError(StrCat("run ", run_id, ": negative OOM memory ",
                                             retry.oom_memory_bytes, " or micro-batch cap ",
                                             retry.micro_batch_cap));
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
    if (retry.micro_batch_cap > 0) {
      CART_RETURN_IF_ERROR(Exec(db, kLowerMicroBatchCap, retry.micro_batch_cap, run_id));
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
    CART_RETURN_IF_ERROR(EndAttempt(db, run_id, attempt,
                                    retry.oom_memory_bytes > 0 || retry.micro_batch_cap > 0
                                        ? AttemptOutcome::kOutOfMemory
                                        : AttemptOutcome::kFailed,
                                    audit.at_us, audit.why));
    CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 0, run_id));
    CART_RETURN_IF_ERROR(
        ChangeState(db, run_id, fence.state, to, Audit{audit.at_us, audit.who, why}));
    return internal::LoadRun(db, run_id);
  });
}

}  // namespace cart::store
