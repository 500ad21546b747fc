#pragma once

// Submission: a sweep file made into the runs cartd stores (docs/architecture.md "Data flow of a
// sweep"). The file is parsed and checked (config/sweep.h), its priority held to what the caller
// may set and its size to cartd's limit, expanded over its grid and over the trained runs of the
// sweeps it derives from, each run's data files matched with the identities the client took, and
// each derived run's parent step checked against the checkpoints that parent keeps. It reads the
// store and writes nothing: the Scheduler stores the result in one transaction.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/sweep.h"
#include "store/run_store.h"

namespace cart::server {

struct SubmitRequest {
  std::string spec_yaml;   // the sweep file's text
  std::string file_name;   // for error messages
  std::string request_id;  // idempotency key; empty: a fresh one (not idempotent)
  bool dry_run = false;
  std::string who;        // "user:<name>"
  int64_t run_limit = 0;  // at most this many runs in SubmitResult::runs; 0: all
  // Data file identities the submitting client took, by path (data lineage): each run's files
  // with one of these paths are recorded with it; the others wait for the first worker.
  std::map<std::string, data::FileIdentity> data_files;
  std::optional<store::SweepProvenance> provenance;  // where the file came from; kept as given
};

struct SubmitResult {
  store::SweepRecord sweep;  // dry run: id 0, name, priority and spec only
  // The runs in index order; dry run: id 0, state QUEUED or BLOCKED as they would start.
  std::vector<store::RunRecord> runs;
  bool existing = false;  // request_id matched an earlier submit: nothing was written
};

// What the server allows of any sweep (SchedulerOptions).
struct SubmitLimits {
  int64_t max_runs_per_sweep = 100'000;  // the file's own max_runs may only lower it
  int64_t max_user_priority = 10;        // an admin may set any
  int64_t max_sweep_bytes = 256 << 20;   // of the runs' configs and keys (config::SweepSpec)
};

// A sweep file made ready to store.
struct PreparedSweep {
  config::SweepSpec spec;
  store::NewSweep sweep;  // client_request_id as the request gave it (maybe empty)
};

// InvalidArgument with file, line and reason; PermissionDenied for a priority above the limit
// (not for an admin, nor a dry run); ResourceExhausted for a grid past the run limit;
// FailedPrecondition for a derived run naming a parent step that parent has passed without
// keeping a checkpoint there (retention removed it, or it was never saved); the store's errors.
absl::StatusOr<PreparedSweep> PrepareSweep(store::RunStore& store, const SubmitRequest& request,
                                           bool admin, const SubmitLimits& limits);

// What a dry run answers: the sweep and (up to `run_limit`, 0: all) its runs as they would be
// stored at `now_us`, with id 0, QUEUED or BLOCKED as they would start.
SubmitResult PreviewSweep(const PreparedSweep& prepared, int64_t run_limit, int64_t now_us);

}  // namespace cart::server
