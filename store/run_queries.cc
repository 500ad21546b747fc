// RunStore: plain queries and administration (backup, integrity check). Every query runs on a
// pooled reader connection inside one read transaction (internal::ReadSnapshot).

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/sql.h"
#include "store/internal/writer.h"
#include "store/run_store.h"

namespace cart::store {

using internal::Database;
using internal::ReadSnapshot;
using internal::RequireRun;

namespace {

constexpr char kSelectEvents[] =
    "SELECT " CART_EVENT_COLUMNS " FROM events WHERE run_id = ? ORDER BY id";
constexpr char kSelectLog[] =
    "SELECT id, attempt, coalesce(seq, 0), wall_time_us, text FROM run_logs "
    "WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?";
constexpr char kSelectSummaries[] =
    "SELECT n.name, s.latest_step, s.latest_value, s.latest_wall_time_us, s.final_step, "
    "s.final_value FROM run_summaries AS s JOIN metric_names AS n ON n.id = s.name_id "
    "WHERE s.run_id = ? ORDER BY n.name";
constexpr char kSelectMaxWorkerMemory[] = "SELECT max(memory_bytes) FROM workers";
constexpr char kSelectWorkers[] =
    "SELECT id, device, memory_bytes, registered_us, last_seen_us FROM workers ORDER BY id";
// What attempts used, added up by the first column (Spending; ?1: now, for running attempts).
#define CART_SPENDING_COLUMNS                                                                  \
  "count(*), count(a.energy_j), coalesce(sum(a.energy_j), 0), "                                \
  "coalesce(sum(max(0, coalesce(a.ended_us, ?1) - coalesce(a.started_us, a.leased_us))), 0), " \
  "coalesce(group_concat(DISTINCT a.energy_source), '') "
constexpr char kSelectSweepSpending[] =
    "SELECT r.sweep_id, " CART_SPENDING_COLUMNS
    "FROM attempts AS a JOIN runs AS r ON r.id = a.run_id GROUP BY r.sweep_id ORDER BY r.sweep_id";
constexpr char kSelectRunSpending[] =
    "SELECT a.run_id, " CART_SPENDING_COLUMNS
    "FROM attempts AS a JOIN runs AS r ON r.id = a.run_id WHERE r.sweep_id = ?2 "
    "GROUP BY a.run_id ORDER BY a.run_id";
#undef CART_SPENDING_COLUMNS
constexpr char kIntegrityCheck[] = "PRAGMA integrity_check";
constexpr char kForeignKeyCheck[] = "PRAGMA foreign_key_check";

// Copies the database behind `src` into dest_path with the backup API, in one step: the copy is
// the snapshot of the moment the step began, whatever writers do meanwhile.
absl::Status BackupConnection(Database& src, const std::string& dest_path) {
  std::error_code ec;
  if (std::filesystem::exists(dest_path, ec)) {
    return absl::AlreadyExistsError(StrCat("backup destination ", dest_path, " already exists"));
  }
  const std::string tmp = StrCat(dest_path, ".tmp-", getpid());
  std::filesystem::remove(tmp, ec);
  sqlite3* dest = nullptr;
  int rc = sqlite3_open_v2(tmp.c_str(), &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  absl::Status status;
  if (rc != SQLITE_OK) {
    status = internal::SqliteError(rc, dest, StrCat("open backup file ", tmp));
  } else {
    sqlite3_backup* backup = sqlite3_backup_init(dest, "main", src.raw(), "main");
    if (backup == nullptr) {
      status = internal::SqliteError(sqlite3_errcode(dest), dest, "backup init");
    } else {
      rc = sqlite3_backup_step(backup, -1);
      sqlite3_backup_finish(backup);
      if (rc != SQLITE_DONE) status = internal::SqliteError(rc, dest, "backup");
    }
  }
  sqlite3_close_v2(dest);
  if (status.ok()) {
    std::filesystem::rename(tmp, dest_path, ec);
    if (ec) {
      status = absl::InternalError(
          StrCat("cannot move backup ", tmp, " to ", dest_path, ": ", ec.message()));
    }
  }
  if (!status.ok()) {
    std::filesystem::remove(tmp, ec);
    std::filesystem::remove(tmp + "-wal", ec);
    std::filesystem::remove(tmp + "-shm", ec);
  }
  return status;
}

absl::StatusOr<IntegrityReport> CheckConnection(Database& db) {
  IntegrityReport report;
  {
    CART_ASSIGN_OR_RETURN(auto check, db.Cached(kIntegrityCheck));
    CART_RETURN_IF_ERROR(check->ForEachRow([&](const auto& cur) -> absl::Status {
      std::string line = cur.ColumnText(0);
      if (line != "ok") report.problems.push_back(std::move(line));
      return absl::OkStatus();
    }));
  }
  CART_ASSIGN_OR_RETURN(auto fk, db.Cached(kForeignKeyCheck));
  CART_RETURN_IF_ERROR(fk->ForEachRow([&](const auto& cur) -> absl::Status {
    report.problems.push_back(StrCat("foreign key: row ", cur.ColumnInt64(1), " of table ",
                                     cur.ColumnText(0), " refers to a missing row of ",
                                     cur.ColumnText(2)));
    return absl::OkStatus();
  }));
  report.ok = report.problems.empty();
  return report;
}

absl::StatusOr<std::unique_ptr<Database>> OpenForAdmin(const std::string& db_path) {
  internal::DatabaseOptions options;
  options.create = false;
  options.read_only = true;
  return Database::Open(db_path, options);
}

}  // namespace

absl::StatusOr<SweepRecord> RunStore::GetSweep(const std::string& name) {
  return ReadSnapshot<SweepRecord>(
      *readers_, [&](Database& db) { return internal::LoadSweepByName(db, name); });
}

absl::StatusOr<std::vector<SweepRecord>> RunStore::ListSweeps() {
  return ReadSnapshot<std::vector<SweepRecord>>(*readers_, internal::LoadAllSweeps);
}

absl::StatusOr<RunRecord> RunStore::GetRun(int64_t run_id) {
  return ReadSnapshot<RunRecord>(*readers_,
                                 [&](Database& db) { return internal::LoadRun(db, run_id); });
}

absl::StatusOr<RunRecord> RunStore::FindRun(const std::string& sweep, const std::string& name) {
  return ReadSnapshot<RunRecord>(
      *readers_, [&](Database& db) { return internal::LoadRunByName(db, sweep, name); });
}

absl::StatusOr<std::vector<RunRecord>> RunStore::ListRuns(const RunFilter& filter) {
  return ReadSnapshot<std::vector<RunRecord>>(
      *readers_, [&](Database& db) { return internal::LoadRuns(db, filter); });
}

absl::StatusOr<std::vector<AttemptRecord>> RunStore::ListAttempts(int64_t run_id) {
  return ReadSnapshot<std::vector<AttemptRecord>>(
      *readers_, [&](Database& db) -> absl::StatusOr<std::vector<AttemptRecord>> {
        CART_RETURN_IF_ERROR(RequireRun(db, run_id));
        return internal::LoadAttempts(db, run_id);
      });
}

namespace {

constexpr char kSelectRunAnnotationHistory[] =
    "SELECT at_us, who, kind, value, previous FROM annotation_history WHERE run_id = ? ORDER BY id";
constexpr char kSelectSweepAnnotationHistory[] =
    "SELECT at_us, who, kind, value, previous FROM annotation_history WHERE sweep_id = ? "
    "ORDER BY id";

absl::StatusOr<std::vector<AnnotationEvent>> LoadAnnotationHistory(Database& db, const char* sql,
                                                                   int64_t owner_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(sql));
  select->BindAll(owner_id);
  std::vector<AnnotationEvent> out;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
    AnnotationEvent e;
    e.at_us = cur.ColumnInt64(0);
    e.who = cur.ColumnText(1);
    const int64_t kind = cur.ColumnInt64(2);
    e.kind = kind == 1   ? AnnotationEvent::Kind::kTagRemoved
             : kind == 2 ? AnnotationEvent::Kind::kNote
                         : AnnotationEvent::Kind::kTagAdded;
    e.value = cur.ColumnText(3);
    e.previous = cur.ColumnText(4);
    out.push_back(std::move(e));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<AnnotationEvent>> RunStore::RunAnnotationHistory(int64_t run_id) {
  using Out = std::vector<AnnotationEvent>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    return LoadAnnotationHistory(db, kSelectRunAnnotationHistory, run_id);
  });
}

absl::StatusOr<std::vector<AnnotationEvent>> RunStore::SweepAnnotationHistory(
    const std::string& name) {
  using Out = std::vector<AnnotationEvent>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
    return LoadAnnotationHistory(db, kSelectSweepAnnotationHistory, sweep.id);
  });
}

absl::StatusOr<std::optional<SweepProvenance>> RunStore::GetSweepProvenance(
    const std::string& name) {
  using Out = std::optional<SweepProvenance>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
    CART_ASSIGN_OR_RETURN(
        auto select, db.Cached("SELECT items, git_diff FROM sweep_provenance WHERE sweep_id = ?"));
    select->BindAll(sweep.id);
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) return Out();
    SweepProvenance out;
    out.items = internal::ParseEnvironmentText(select->ColumnText(0));
    out.git_diff = select->ColumnText(1);
    return Out(std::move(out));
  });
}

namespace {

// The rows of kSelectSweepSpending or kSelectRunSpending, by their first column.
template <typename Statement>
absl::StatusOr<std::map<int64_t, Spending>> ReadSpending(Statement& select) {
  std::map<int64_t, Spending> out;
  CART_RETURN_IF_ERROR(select.ForEachRow([&](const auto& cur) {
    Spending& s = out[cur.ColumnInt64(0)];
    s.attempts = cur.ColumnInt64(1);
    s.measured_attempts = cur.ColumnInt64(2);
    s.energy_j = cur.ColumnDouble(3);
    s.device_hours = static_cast<double>(cur.ColumnInt64(4)) / 3.6e9;
    for (const std::string& source : Split(cur.ColumnText(5), ',')) {
      if (!source.empty()) s.sources.push_back(source);
    }
    std::sort(s.sources.begin(), s.sources.end());
  }));
  return out;
}

}  // namespace

absl::StatusOr<std::map<int64_t, Spending>> RunStore::SweepSpending(int64_t now_us) {
  using Out = std::map<int64_t, Spending>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSweepSpending));
    select->BindAll(now_us);
    return ReadSpending(*select);
  });
}

absl::StatusOr<std::map<int64_t, Spending>> RunStore::RunSpending(const std::string& sweep,
                                                                  int64_t now_us) {
  using Out = std::map<int64_t, Spending>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(SweepRecord record, internal::LoadSweepByName(db, sweep));
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunSpending));
    select->BindAll(now_us, record.id);
    return ReadSpending(*select);
  });
}

absl::StatusOr<std::vector<EventRecord>> RunStore::RunEvents(int64_t run_id) {
  using Out = std::vector<EventRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectEvents));
    select->BindAll(run_id);
    Out out;
    CART_RETURN_IF_ERROR(
        select->ForEachRow([&](const auto& cur) { out.push_back(internal::ReadEvent(cur)); }));
    return out;
  });
}

absl::StatusOr<std::vector<LogLine>> RunStore::RunLog(int64_t run_id, int64_t after_id,
                                                      int64_t limit) {
  using Out = std::vector<LogLine>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectLog));
    select->BindAll(run_id, after_id, limit > 0 ? limit : int64_t{-1});  // -1: no limit
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      LogLine line;
      line.id = cur.ColumnInt64(0);
      line.attempt = cur.ColumnInt64(1);
      line.seq = cur.ColumnInt64(2);
      line.wall_time_us = cur.ColumnInt64(3);
      line.text = cur.ColumnText(4);
      out.push_back(std::move(line));
      return absl::OkStatus();
    }));
    return out;
  });
}

absl::StatusOr<std::vector<MetricSummary>> RunStore::RunSummaries(int64_t run_id) {
  using Out = std::vector<MetricSummary>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSummaries));
    select->BindAll(run_id);
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      MetricSummary s;
      s.name = cur.ColumnText(0);
      s.latest_step = cur.ColumnInt64(1);
      s.latest_value = cur.ColumnDouble(2);
      s.latest_wall_time_us = cur.ColumnInt64(3);
      s.final_step = cur.ColumnOptionalInt64(4);
      if (s.final_step) s.final_value = cur.ColumnDouble(5);
      out.push_back(std::move(s));
      return absl::OkStatus();
    }));
    return out;
  });
}

absl::StatusOr<std::vector<CheckpointRecord>> RunStore::ListCheckpoints(int64_t run_id) {
  using Out = std::vector<CheckpointRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    return internal::LoadCheckpoints(db, run_id);
  });
}

absl::StatusOr<std::vector<RunDataRecord>> RunStore::RunData(int64_t run_id) {
  using Out = std::vector<RunDataRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    return internal::LoadRunData(db, run_id);
  });
}

absl::StatusOr<std::optional<CheckpointRecord>> RunStore::LatestCheckpoint(int64_t run_id) {
  using Out = std::optional<CheckpointRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    return internal::LatestCheckpoint(db, run_id);
  });
}

absl::StatusOr<std::optional<int64_t>> RunStore::MaxWorkerMemory() {
  using Out = std::optional<int64_t>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectMaxWorkerMemory));
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) return Out();
    return select->ColumnOptionalInt64(0);
  });
}

absl::StatusOr<std::vector<WorkerRecord>> RunStore::ListWorkers() {
  using Out = std::vector<WorkerRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectWorkers));
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      out.push_back(WorkerRecord{cur.ColumnText(0), cur.ColumnText(1), cur.ColumnInt64(2),
                                 cur.ColumnInt64(3), cur.ColumnInt64(4)});
      return absl::OkStatus();
    }));
    return out;
  });
}

absl::Status RunStore::Backup(const std::string& dest_path) {
  CART_ASSIGN_OR_RETURN(auto lease, readers_->Acquire());
  return BackupConnection(lease.db(), dest_path);
}

absl::StatusOr<IntegrityReport> RunStore::IntegrityCheck() {
  return ReadSnapshot<IntegrityReport>(*readers_, CheckConnection);
}

absl::Status BackupDatabase(const std::string& db_path, const std::string& dest_path) {
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenForAdmin(db_path));
  return BackupConnection(*db, dest_path);
}

absl::StatusOr<IntegrityReport> CheckDatabase(const std::string& db_path) {
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenForAdmin(db_path));
  return CheckConnection(*db);
}

absl::StatusOr<std::vector<PlanRecord>> RunStore::ListPlans() {
  using Out = std::vector<PlanRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    Out out;
    std::map<int64_t, size_t> at;  // plan id -> index in out
    CART_ASSIGN_OR_RETURN(
        auto plans, db.Cached("SELECT id, created_us, created_by, power, alpha, budget_hours, "
                              "spending, text FROM plans ORDER BY id"));
    CART_RETURN_IF_ERROR(plans->ForEachRow([&](const auto& row) {
      PlanRecord p;
      p.id = row.ColumnInt64(0);
      p.created_us = row.ColumnInt64(1);
      p.created_by = row.ColumnText(2);
      p.power = row.ColumnDouble(3);
      p.alpha = row.ColumnDouble(4);
      if (!row.ColumnIsNull(5)) p.budget_hours = row.ColumnDouble(5);
      p.spending = row.ColumnText(6);
      p.text = row.ColumnText(7);
      at.emplace(p.id, out.size());
      out.push_back(std::move(p));
    }));
    CART_ASSIGN_OR_RETURN(
        auto claims, db.Cached("SELECT plan_id, claim, seeds_now, seeds_target, runs, hours FROM "
                               "plan_claims ORDER BY plan_id, claim"));
    CART_RETURN_IF_ERROR(claims->ForEachRow([&](const auto& row) {
      auto it = at.find(row.ColumnInt64(0));
      if (it == at.end()) return;
      out[it->second].claims.push_back({row.ColumnText(1), row.ColumnInt64(2), row.ColumnInt64(3),
                                        row.ColumnInt64(4), row.ColumnDouble(5)});
    }));
    CART_ASSIGN_OR_RETURN(
        auto runs, db.Cached("SELECT plan_id, id FROM runs WHERE plan_id IS NOT NULL ORDER BY id"));
    CART_RETURN_IF_ERROR(runs->ForEachRow([&](const auto& row) {
      auto it = at.find(row.ColumnInt64(0));
      if (it != at.end()) out[it->second].run_ids.push_back(row.ColumnInt64(1));
    }));
    return out;
  });
}

absl::StatusOr<std::vector<EvalItems>> RunStore::ListEvalItems(int64_t run_id) {
  using Out = std::vector<EvalItems>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_RETURN_IF_ERROR(RequireRun(db, run_id));
    CART_ASSIGN_OR_RETURN(auto select,
                          db.Cached("SELECT task, loops, correct, correct_norm, logprob FROM "
                                    "eval_items WHERE run_id = ? ORDER BY task, loops"));
    select->BindAll(run_id);
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& row) {
      EvalItems e;
      e.task = row.ColumnText(0);
      e.loops = static_cast<int>(row.ColumnInt64(1));
      e.correct = row.ColumnText(2);
      e.correct_norm = row.ColumnText(3);
      const std::string blob = row.ColumnBlob(4);
      e.logprob.resize(blob.size() / sizeof(double));
      std::memcpy(e.logprob.data(), blob.data(), e.logprob.size() * sizeof(double));
      out.push_back(std::move(e));
    }));
    return out;
  });
}

}  // namespace cart::store
