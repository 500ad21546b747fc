// RunStore: the paged reads of store/pages.h. Every one is a fixed number of statements inside one
// read transaction, whatever the number of runs: the run ids of a page come from one sorted query,
// their records and latest metric values from one query each.

#include <algorithm>
#include <limits>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/sql.h"
#include "store/internal/validate.h"
#include "store/internal/writer.h"
#include "store/run_store.h"

namespace cart::store {

using internal::Database;
using internal::ReadSnapshot;
using internal::Statement;

namespace {

// The step a run has reached: the highest latest_step among its metric summaries.
constexpr char kStepExpr[] =
    "(SELECT max(x.latest_step) FROM run_summaries AS x WHERE x.run_id = r.id)";
constexpr char kWorkerExpr[] =
    "(SELECT a.worker_id FROM attempts AS a WHERE a.run_id = r.id AND a.attempt = r.attempt)";
// A run's planned training tokens, from its config keys.
constexpr char kPlannedTokens[] =
    "r.steps * CAST(coalesce(json_extract(r.params_json, '$.batch'), 0) AS INTEGER) * "
    "CAST(coalesce(json_extract(r.params_json, '$.accum'), 1) AS INTEGER) * "
    "CAST(coalesce(json_extract(r.params_json, '$.seq_len'), 0) AS INTEGER)";

// A token count from a floating-point total, clamped to [0, INT64_MAX].
int64_t SaturatingTokens(double v) {
  constexpr double kMax = 9223372036854775807.0;  // rounds to 2^63
  if (!(v > 0)) return 0;                         // also NaN
  if (v >= kMax) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(v);
}

std::string Placeholders(size_t n) {
  std::string text;
  for (size_t i = 0; i < n; ++i) text += i == 0 ? "?" : ", ?";
  return text;
}

// ORDER BY for a RunPageRequest's sort, with the values it binds (after the filter's). The id
// breaks ties so that paging never repeats or skips a run.
struct OrderSql {
  std::string joins;       // extra joins the order needs
  std::string join_binds;  // a metric name bound in the join, when sorting by a metric
  std::string order;
  std::vector<std::string> binds;
};

absl::StatusOr<OrderSql> BuildOrder(const RunPageRequest& request) {
  const std::string dir = request.descending ? " DESC" : " ASC";
  OrderSql out;
  const std::string& sort = request.sort.empty() ? std::string("id") : request.sort;
  if (sort == "id") {
    out.order = StrCat(" ORDER BY r.id", dir);
    return out;
  }
  if (sort == "name") {
    out.order = StrCat(" ORDER BY CAST(r.name AS INTEGER)", dir, ", r.name", dir, ", r.id", dir);
  } else if (sort == "state") {
    out.order = StrCat(" ORDER BY r.status", dir, ", r.id", dir);
  } else if (sort == "step") {
    out.order = StrCat(" ORDER BY coalesce(", kStepExpr, ", 0)", dir, ", r.id", dir);
  } else if (sort == "updated") {
    out.order = StrCat(" ORDER BY r.updated_us", dir, ", r.id", dir);
  } else if (sort.rfind("param:", 0) == 0 && sort.size() > 6) {
    const std::string path = internal::JsonPath(sort.substr(6));
    // Numbers before text, each group in its own order; a run without the key goes last.
    out.order = StrCat(" ORDER BY json_extract(r.params_json, ?) IS NULL, ",
                       "(CAST(json_extract(r.params_json, ?) AS REAL) = 0 AND "
                       "json_extract(r.params_json, ?) NOT GLOB '*[0-9]*'), "
                       "CAST(json_extract(r.params_json, ?) AS REAL)",
                       dir, ", json_extract(r.params_json, ?)", dir, ", r.id", dir);
    out.binds = {path, path, path, path, path};
  } else if (sort.rfind("metric:", 0) == 0 && sort.size() > 7) {
    if (!internal::IsMetricName(sort.substr(7))) {
      return absl::InvalidArgumentError(
          StrCat("sort metric:", ValidUtf8(sort.substr(7, 64)),
                 ": not a metric name (1 to 128 letters, digits, '_', '.', '-', '/')"));
    }
    out.joins =
        " LEFT JOIN run_summaries AS ms ON ms.run_id = r.id AND ms.name_id = "
        "(SELECT id FROM metric_names WHERE name = ?)";
    out.join_binds = sort.substr(7);
    out.order = StrCat(" ORDER BY ms.latest_value IS NULL, ms.latest_value", dir, ", r.id", dir);
  } else {
    return absl::InvalidArgumentError(
        StrCat("sort '", sort,
               "' is not one of id, name, state, step, updated, param:<key>, metric:<name>"));
  }
  return out;
}

void BindTexts(Statement& statement, const std::vector<std::string>& texts, int* index) {
  for (const std::string& text : texts) statement.BindText(++*index, text);
}

absl::StatusOr<RunPage> LoadRunPage(Database& db, const RunPageRequest& request) {
  if (request.offset < 0 || request.limit < 0) {
    return absl::InvalidArgumentError(StrCat("offset (", request.offset, ") and limit (",
                                             request.limit, ") must not be negative"));
  }
  CART_ASSIGN_OR_RETURN(const internal::FilterSql where, internal::BuildFilterSql(request.filter));
  CART_ASSIGN_OR_RETURN(OrderSql order, BuildOrder(request));
  RunPage page;
  {
    CART_ASSIGN_OR_RETURN(
        auto count,
        db.Prepare(StrCat("SELECT count(*) FROM runs AS r WHERE 1 = 1", where.conditions)));
    int index = 0;
    BindTexts(*count, where.binds, &index);
    CART_ASSIGN_OR_RETURN(bool row, count->Step());
    if (row) page.total = count->ColumnInt64(0);
  }
  // The page: ids in order, with the step and worker of each.
  std::vector<int64_t> ids;
  std::map<int64_t, std::pair<int64_t, std::string>> extra;  // id -> (step, worker)
  {
    CART_ASSIGN_OR_RETURN(
        auto select,
        db.Prepare(StrCat("SELECT r.id, coalesce(", kStepExpr, ", 0), coalesce(", kWorkerExpr,
                          ", '') FROM runs AS r", order.joins, " WHERE 1 = 1", where.conditions,
                          order.order, " LIMIT ? OFFSET ?")));
    int index = 0;
    if (!order.join_binds.empty()) select->BindText(++index, order.join_binds);
    BindTexts(*select, where.binds, &index);
    BindTexts(*select, order.binds, &index);
    select->BindInt64(++index, request.limit > 0 ? request.limit : int64_t{-1});
    select->BindInt64(++index, request.offset);
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
      ids.push_back(cur.ColumnInt64(0));
      extra[ids.back()] = {cur.ColumnInt64(1), cur.ColumnText(2)};
      return absl::OkStatus();
    }));
  }
  if (ids.empty()) return page;
  // Their records, then their latest values, each in one statement (chunks keep the number of
  // bound values under SQLite's limit on a page of every run).
  std::map<int64_t, RunRecord> records;
  std::map<int64_t, std::map<std::string, double>> latest;
  constexpr size_t kChunk = 500;
  for (size_t begin = 0; begin < ids.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, ids.size() - begin);
    {
      CART_ASSIGN_OR_RETURN(
          auto select,
          db.Prepare(StrCat(internal::kRunSelectSql, "WHERE r.id IN (", Placeholders(n), ")")));
      for (size_t i = 0; i < n; ++i) select->BindInt64(static_cast<int>(i + 1), ids[begin + i]);
      CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
        CART_ASSIGN_OR_RETURN(RunRecord run, internal::ReadRunRow(db, cur));
        const int64_t id = run.id;
        records[id] = std::move(run);
        return absl::OkStatus();
      }));
    }
    if (request.metrics.empty()) continue;
    CART_ASSIGN_OR_RETURN(
        auto values,
        db.Prepare(StrCat("SELECT s.run_id, n.name, s.latest_value FROM run_summaries AS s "
                          "JOIN metric_names AS n ON n.id = s.name_id WHERE s.run_id IN (",
                          Placeholders(n), ") AND n.name IN (",
                          Placeholders(request.metrics.size()), ")")));
    int index = 0;
    for (size_t i = 0; i < n; ++i) values->BindInt64(++index, ids[begin + i]);
    BindTexts(*values, request.metrics, &index);
    CART_RETURN_IF_ERROR(values->ForEachRow([&](const Statement& cur) -> absl::Status {
      latest[cur.ColumnInt64(0)][cur.ColumnText(1)] = cur.ColumnDouble(2);
      return absl::OkStatus();
    }));
  }
  page.rows.reserve(ids.size());
  for (int64_t id : ids) {
    auto record = records.find(id);
    if (record == records.end()) continue;  // cannot happen inside one snapshot
    RunRow row;
    row.run = std::move(record->second);
    row.step = extra[id].first;
    row.worker_id = std::move(extra[id].second);
    if (auto it = latest.find(id); it != latest.end()) row.latest = std::move(it->second);
    page.rows.push_back(std::move(row));
  }
  return page;
}

absl::StatusOr<std::vector<SweepProgress>> LoadSweepProgress(Database& db) {
  CART_ASSIGN_OR_RETURN(std::vector<SweepRecord> sweeps, internal::LoadAllSweeps(db));
  std::vector<SweepProgress> out;
  std::map<int64_t, size_t> at;  // sweep id -> index in out
  for (SweepRecord& sweep : sweeps) {
    at[sweep.id] = out.size();
    out.push_back(SweepProgress{std::move(sweep)});
  }
  {
    // Planned and done tokens of the train jobs, in one pass over the runs.
    CART_ASSIGN_OR_RETURN(
        auto select,
        // total(), not sum(): a sum of integers past 2^63 is an "integer overflow" error in
        // SQLite, and one sweep inside every validated bound (a billion steps of a million
        // sequences) gets there; total() adds in floating point and never fails.
        db.Prepare(StrCat("SELECT r.sweep_id, count(*), total(", kPlannedTokens,
                          "), total(CASE WHEN r.status = "
                          "'SUCCEEDED' THEN ",
                          kPlannedTokens, " ELSE min(coalesce(t.latest_value, 0), ", kPlannedTokens,
                          ") END), total(CASE WHEN r.status = 'RUNNING' THEN "
                          "coalesce(v.latest_value, 0) ELSE 0 END) FROM runs AS r "
                          "LEFT JOIN run_summaries AS t ON t.run_id = r.id AND t.name_id = "
                          "(SELECT id FROM metric_names WHERE name = 'tokens') "
                          "LEFT JOIN run_summaries AS v ON v.run_id = r.id AND v.name_id = "
                          "(SELECT id FROM metric_names WHERE name = 'tokens_per_s') "
                          "WHERE r.kind = 'train' GROUP BY r.sweep_id")));
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
      auto it = at.find(cur.ColumnInt64(0));
      if (it == at.end()) return absl::OkStatus();
      SweepProgress& p = out[it->second];
      p.train_runs = cur.ColumnInt64(1);
      p.planned_tokens = SaturatingTokens(cur.ColumnDouble(2));
      p.done_tokens = SaturatingTokens(cur.ColumnDouble(3));
      const double rate = cur.ColumnDouble(4);
      p.tokens_per_s = rate == rate ? rate : 0;  // NaN (a NULL) counts as nothing
      return absl::OkStatus();
    }));
  }
  return out;
}

absl::StatusOr<SweepKeys> LoadSweepKeys(Database& db, const std::string& sweep) {
  CART_ASSIGN_OR_RETURN(SweepRecord record, internal::LoadSweepByName(db, sweep));
  SweepKeys keys;
  {
    CART_ASSIGN_OR_RETURN(auto select,
                          db.Prepare("SELECT j.key FROM runs AS r, json_each(r.params_json) AS j "
                                     "WHERE r.sweep_id = ? AND r.kind = 'train' GROUP BY j.key "
                                     "HAVING count(DISTINCT j.value) > 1 ORDER BY j.key"));
    select->BindInt64(1, record.id);
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
      keys.varying.push_back(cur.ColumnText(0));
      return absl::OkStatus();
    }));
  }
  CART_ASSIGN_OR_RETURN(
      auto select,
      db.Prepare("SELECT n.name FROM metric_names AS n WHERE EXISTS (SELECT 1 FROM run_summaries "
                 "AS s JOIN runs AS r ON r.id = s.run_id WHERE s.name_id = n.id AND "
                 "r.sweep_id = ?) ORDER BY n.name"));
  select->BindInt64(1, record.id);
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
    keys.metrics.push_back(cur.ColumnText(0));
    return absl::OkStatus();
  }));
  return keys;
}

absl::StatusOr<StoreTotals> LoadTotals(Database& db) {
  StoreTotals totals;
  {
    CART_ASSIGN_OR_RETURN(auto select,
                          db.Prepare("SELECT status, count(*) FROM runs GROUP BY status"));
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& cur) -> absl::Status {
      if (std::optional<RunState> state = ParseRunState(cur.ColumnText(0))) {
        totals.runs[*state] = cur.ColumnInt64(1);
      }
      return absl::OkStatus();
    }));
  }
  CART_ASSIGN_OR_RETURN(auto select,
                        db.Prepare("SELECT count(*), coalesce(sum(size_bytes), 0) FROM artifacts"));
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (row) {
    totals.artifacts = select->ColumnInt64(0);
    totals.artifact_bytes = select->ColumnInt64(1);
  }
  return totals;
}

}  // namespace

absl::StatusOr<RunPage> RunStore::ListRunPage(const RunPageRequest& request) {
  return ReadSnapshot<RunPage>(*readers_, [&](Database& db) { return LoadRunPage(db, request); });
}

absl::StatusOr<std::vector<SweepProgress>> RunStore::ListSweepProgress() {
  return ReadSnapshot<std::vector<SweepProgress>>(*readers_, LoadSweepProgress);
}

absl::StatusOr<SweepKeys> RunStore::GetSweepKeys(const std::string& sweep) {
  return ReadSnapshot<SweepKeys>(*readers_, [&](Database& db) { return LoadSweepKeys(db, sweep); });
}

absl::StatusOr<StoreTotals> RunStore::Totals() {
  return ReadSnapshot<StoreTotals>(*readers_, LoadTotals);
}

}  // namespace cart::store
