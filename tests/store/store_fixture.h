#pragma once

// Helpers shared by the store tests: building sweeps and driving runs through their lifecycle.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "store/run_store.h"
#include "tests/support/test_support.h"

namespace cart::store::testing {

constexpr int64_t kGiB = int64_t{1} << 30;
// A fixed epoch for test timestamps (Unix microseconds).
constexpr int64_t kT0 = 1'700'000'000'000'000;

// A run named `name` with the given config keys (d, seed and steps default to 256, 42, 1000).
NewRun MakeRun(const std::string& name, std::map<std::string, std::string> params,
               int64_t memory_bytes = kGiB);

NewSweep MakeSweep(const std::string& name, std::vector<NewRun> runs, int64_t priority = 0);

Audit By(const std::string& who, int64_t at_us, const std::string& why = "test");

// Opens a store on `path` with default options (lease TTL 60 s). Fails the test on error.
std::unique_ptr<RunStore> OpenStore(const std::string& path);

// Claims every QUEUED run with worker "fixture-worker" (registered with 80 GiB) in claim order,
// marks it RUNNING, appends the points `points_of(run)` returns, and ends it with the outcome
// `outcome_of(run)` gives (nullopt: leave it RUNNING; no function: kSucceeded). Returns the run
// ids in claim order.
std::vector<int64_t> FinishAllQueued(
    RunStore& store, const std::function<std::vector<MetricPoint>(const RunRecord&)>& points_of,
    const std::function<std::optional<AttemptOutcome>(const RunRecord&)>& outcome_of = nullptr,
    int64_t now_us = kT0);

// Runs `sql` (statements separated by ';') on the SQLite file at `path` through a connection of
// its own, as another process could while the store is open: to break and mend the schema under
// a running store. Fails the test on error.
void ExecOnDatabaseFile(const std::string& path, const std::string& sql);

// One point per name at `step`.
std::vector<MetricPoint> PointsAt(int64_t step, const std::map<std::string, double>& values);

}  // namespace cart::store::testing
