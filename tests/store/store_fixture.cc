#include "tests/store/store_fixture.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "common/strings.h"

namespace cart::store::testing {

NewRun MakeRun(const std::string& name, std::map<std::string, std::string> params,
               int64_t memory_bytes) {
  params.emplace("d", "256");
  params.emplace("seed", "42");
  params.emplace("steps", "1000");
  NewRun run;
  run.name = name;
  std::string yaml;
  for (const auto& [key, value] : params) yaml += StrCat(key, ": ", value, "\n");
  run.config_yaml = yaml;
  run.params = std::move(params);
  run.stored_params = 14'370'000;
  run.effective_params = 17'970'000;
  run.memory_estimate_bytes = memory_bytes;
  return run;
}

NewSweep MakeSweep(const std::string& name, std::vector<NewRun> runs, int64_t priority) {
  NewSweep sweep;
  sweep.name = name;
  sweep.client_request_id = StrCat("req-", name);
  sweep.spec_text = StrCat("name: ", name, "\n");
  sweep.priority = priority;
  sweep.runs = std::move(runs);
  return sweep;
}

Audit By(const std::string& who, int64_t at_us, const std::string& why) {
  return Audit{at_us, who, why};
}

std::unique_ptr<RunStore> OpenStore(const std::string& path) {
  StoreOptions options;
  options.path = path;
  auto store = RunStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::vector<int64_t> FinishAllQueued(
    RunStore& store, const std::function<std::vector<MetricPoint>(const RunRecord&)>& points_of,
    const std::function<std::optional<AttemptOutcome>(const RunRecord&)>& outcome_of,
    int64_t now_us) {
  std::vector<int64_t> finished;
  EXPECT_THAT(store.RegisterWorker("fixture-worker", "test", 80 * kGiB, now_us),
              ::cart::testing::IsOk());
  while (true) {
    auto claim = store.ClaimNextRun("fixture-worker", 80 * kGiB, now_us);
    EXPECT_TRUE(claim.ok()) << claim.status();
    if (!claim.ok() || !claim->has_value()) break;
    const Claim& c = **claim;
    EXPECT_THAT(store.MarkRunning(c.run.id, c.attempt, now_us), ::cart::testing::IsOk());
    std::vector<MetricPoint> points = points_of(c.run);
    if (!points.empty()) {
      EXPECT_THAT(store.AppendMetrics(c.run.id, c.attempt, points), ::cart::testing::IsOk());
    }
    const std::optional<AttemptOutcome> outcome =
        outcome_of ? outcome_of(c.run) : AttemptOutcome::kSucceeded;
    if (outcome) {
      EXPECT_THAT(store.RecordAttemptOutcome(c.run.id, c.attempt, *outcome,
                                             By("worker:fixture-worker", now_us, "done")),
                  ::cart::testing::IsOk());
    }
    finished.push_back(c.run.id);
  }
  return finished;
}

std::vector<MetricPoint> PointsAt(int64_t step, const std::map<std::string, double>& values) {
  std::vector<MetricPoint> points;
  for (const auto& [name, value] : values) {
    points.push_back(MetricPoint{step, name, value, kT0 + step});
  }
  return points;
}

void ExecOnDatabaseFile(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK) << path;
  sqlite3_busy_timeout(db, 5000);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error != nullptr ? error : "") << " in: " << sql;
  sqlite3_free(error);
  sqlite3_close(db);
}

}  // namespace cart::store::testing
