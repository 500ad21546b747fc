// RunStore's writes: what workers report (metrics, log lines, checkpoints). Each public method
// validates its input on the calling thread, then hands a closure to the writer thread
// (internal/writer.h); the closure reads what it needs, checks the state, and writes, all inside
// its savepoint.
#include <algorithm>
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

using internal::CheckFence;
using internal::Database;
using internal::Exec;
using internal::UnblockChildren;
using internal::WriteContext;

namespace {

constexpr char kInsertMetricName[] =
    "INSERT INTO metric_names(name) VALUES(?) ON CONFLICT(name) DO NOTHING";
constexpr char kSelectMetricNameId[] = "SELECT id FROM metric_names WHERE name = ?";
constexpr char kInsertMetricsHead[] =
    "INSERT INTO metrics(run_id, name_id, step, value, wall_time_us) VALUES ";
constexpr char kInsertMetricsTuple[] = "(?, ?, ?, ?, ?)";
constexpr char kInsertMetricsTail[] = " ON CONFLICT(run_id, name_id, step) DO NOTHING";

const internal::MultiRowInsertSql& InsertMetricsSql() {
  static const auto* const kSql = new internal::MultiRowInsertSql(
      kInsertMetricsHead, kInsertMetricsTuple, 5, kInsertMetricsTail, /*max_rows=*/250);
  return *kSql;
}

constexpr char kUpsertSummary[] =
    "INSERT INTO run_summaries(run_id, name_id, latest_step, latest_value, latest_wall_time_us) "
    "VALUES(?, ?, ?, ?, ?) ON CONFLICT(run_id, name_id) DO UPDATE SET "
    "latest_step = excluded.latest_step, latest_value = excluded.latest_value, "
    "latest_wall_time_us = excluded.latest_wall_time_us "
    "WHERE excluded.latest_step > run_summaries.latest_step";
constexpr char kInsertLogLine[] =
    "INSERT INTO run_logs(run_id, attempt, seq, wall_time_us, text) VALUES(?, ?, ?, ?, ?) "
    "ON CONFLICT(run_id, attempt, seq) DO NOTHING";
constexpr char kSelectArtifactSize[] = "SELECT size_bytes FROM artifacts WHERE sha256 = ?";
constexpr char kInsertArtifact[] =
    "INSERT INTO artifacts(sha256, size_bytes, path, created_us) VALUES(?, ?, ?, ?)";
constexpr char kUpsertCheckpoint[] =
    "INSERT INTO checkpoints(run_id, step, attempt, sha256, created_us) VALUES(?, ?, ?, ?, ?) "
    "ON CONFLICT(run_id, step) DO UPDATE SET attempt = excluded.attempt, "
    "sha256 = excluded.sha256, created_us = excluded.created_us";
// The attempt's work is kept by the run from now on, whatever retention later deletes
// (RunRecord::device_classes).
constexpr char kMarkAttemptKept[] =
    "UPDATE attempts SET kept_work = 1 WHERE run_id = ? AND attempt = ? AND kept_work = 0";

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
                        Utf8Cut(line.text, kMaxLogLineBytes));
      } else {
        insert->BindAll(run_id, attempt, std::nullopt, line.wall_time_us,
                        Utf8Cut(line.text, kMaxLogLineBytes));
      }
      CART_RETURN_IF_ERROR(insert->Run());
      added += db.Changes();
    }
    return added;
  });
}

absl::StatusOr<CheckpointRecord> RunStore::RecordCheckpoint(
    int64_t run_id, int64_t attempt, const NewCheckpoint& checkpoint, int64_t now_us,
    const std::function<absl::Status()>& blob_present) {
  CART_RETURN_IF_ERROR(internal::ValidateCheckpoint(run_id, checkpoint));
  return writer_->Run<CheckpointRecord>([&](WriteContext& ctx) -> absl::StatusOr<CheckpointRecord> {
    Database& db = ctx.db();
    CART_RETURN_IF_ERROR(CheckFence(db, run_id, attempt, "checkpoint").status());
    if (blob_present) CART_RETURN_IF_ERROR(blob_present());
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
    CART_RETURN_IF_ERROR(Exec(db, kMarkAttemptKept, run_id, attempt));
    const std::string step_text = StrCat(checkpoint.step);
    CART_RETURN_IF_ERROR(UnblockChildren(
        db, run_id, [&](const std::string& selector) { return selector == step_text; },
        StrCat("parent run ", run_id, " recorded its checkpoint at step ", step_text), now_us));
    CART_ASSIGN_OR_RETURN(auto stored, internal::CheckpointAt(db, run_id, checkpoint.step));
    if (!stored) return absl::InternalError("checkpoint vanished after insert");
    return *std::move(stored);
  });
}

}  // namespace cart::store
