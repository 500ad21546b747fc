#pragma once

// Sweep files (YAML): a base run config, a grid over any config key, seeds, priority, retry budget
// and derived jobs, expanded into runs. No Torch, no gRPC: `cart sweep submit --dry-run` and cartd
// run this same code.
//
//   name: stage1
//   base: {d: 256, P: 2, R: 2, steps: 3000, seq_len: 512, train_data: mix.bin}
//   grid: {d: [256, 512, 768, 1024], R: [2, 4, 6, 8], P: [2, 3, 4, 6]}
//   variants:           # optional: run sets differing in several keys at once, each crossed
//     - {}              # with every grid point and seed ({}: the base as it is)
//     - {core: unshared, core_attn: self}
//   seeds: [42]
//   extra_seeds:        # optional: more seeds at some grid points only, run after the grid
//     - at: {d: 1024, P: 6}   # grid keys and values; every point that has them
//       seeds: [43, 44]       # seeds not in `seeds`
//   priority: 10          # higher runs first
//   budget_device_hours: 40   # optional: runs start only while the sweep's device-hours fit it
//   max_attempts: 3       # attempts per run before FAILED
//   max_runs: 10000       # refuse a grid that expands past this
//   derived:
//     - name: varR        # one eval job per matching parent
//       kind: eval        # eval | train
//       from: {match: {R: 6}, checkpoint: final}   # or {run: 3, checkpoint: 1500}
//       eval_loops: [1, 2, 4, 6, 8, 16]
//       set: {R_infer: 6} # config overrides for the derived job (tasks/val_data as mappings)
//     - name: varR2       # from the runs of another, already submitted sweep
//       from: {sweep: stage2, match: {d: 1024, R: 6}, checkpoint: final}
//   device_classes:       # optional (docs/architecture.md "Device classes")
//     balance: true       # spread each config's seeds over the device classes present
//     resume: same        # same (default): a checkpointed run stays on its class; any
//
// A sweep with neither `base` nor `grid` trains nothing itself and holds only derived jobs.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_kind.h"
#include "config/config.h"

namespace cart::config {

struct DerivedSpec {
  std::string name;
  std::string sweep;  // parents from this other sweep; empty: this sweep's own grid
  JobKind kind = JobKind::kEval;
  std::map<std::string, std::string> match;              // parents whose params have these values
  int64_t run_index = -1;                                // or one parent by index (>= 0)
  int64_t checkpoint_step = -1;                          // -1: the parent's final checkpoint
  std::vector<int> eval_loops;                           // eval: R_infer values, 1..16
  std::vector<std::pair<std::string, std::string>> set;  // config overrides
  std::string set_maps_yaml;  // `set` entries that are mappings (tasks, val_data), as YAML
};

// More seeds at the grid points that have the given values (`extra_seeds:`): where a decision
// reads only a few points of a grid, those get the seeds it needs without multiplying the rest.
struct ExtraSeeds {
  std::vector<std::pair<std::string, std::string>> at;  // grid key -> value, as written
  std::vector<int64_t> seeds;
  int line = 0;  // 1-based line of the entry in the sweep file, for errors found at expansion
};

struct SweepSpec {
  std::string name;
  std::string base_yaml;  // the `base` mapping as YAML text
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;  // key -> values, file order
  // Each entry: config overrides applied after the grid point (empty: none), file order.
  std::vector<std::vector<std::pair<std::string, std::string>>> variants;
  std::vector<int64_t> seeds = {42};
  std::vector<ExtraSeeds> extra_seeds;  // runs after the grid's, in file order
  int64_t priority = 0;
  // budget_device_hours: the sweep's device-hour budget (docs/operations.md "Budgets"); none: only
  // its owner's applies.
  std::optional<double> budget_device_hours;
  int64_t max_attempts = 3;
  int64_t max_runs = 10000;
  // device_classes.balance: each config's seeds are placed across the device classes present.
  bool balance_device_classes = false;
  // device_classes.resume: any — a checkpointed run's later attempts may change class.
  bool resume_any_device_class = false;
  // The most bytes the expanded runs' configs and keys may hold together (set by cartd,
  // max_sweep_bytes; not a file key); 0: no bound. ExpandSweep stops at the run that passes it.
  int64_t max_bytes = 0;
  std::vector<DerivedSpec> derived;
};

struct ExpandedRun {
  int64_t index = 0;  // 0-based within the sweep
  std::string name;   // "<sweep>/<index>"
  JobKind kind = JobKind::kTrain;
  RunConfig config;                           // resolved
  std::string config_yaml;                    // ToYaml(config)
  std::map<std::string, std::string> params;  // every scalar key -> value (the pivot keys)
  int64_t stored_params = 0;
  int64_t effective_params = 0;
  int64_t memory_estimate_bytes = 0;    // per micro-batch training estimate (EstimateTrainingBytes)
  int64_t min_memory_bytes = 0;         // the estimate at micro-batch 1 (MinTrainingBytes)
  int64_t parent_index = -1;            // derived jobs: index of the parent run in this sweep
  int64_t parent_run_id = 0;            // ... or the id of a run of another sweep (0: none)
  std::string parent_name;              // that run's "<sweep>/<index>" (for messages)
  int64_t parent_checkpoint_step = -1;  // -1: the parent's final checkpoint
  std::vector<int> eval_loops;
};

// Parses a sweep file. InvalidArgument "<file>:<line>: <key>: <reason>" for unknown keys, bad
// values and invalid combinations (the message lists allowed values).
absl::StatusOr<SweepSpec> ParseSweepYaml(std::string_view text, std::string_view file);

// A run that derived jobs of another sweep may start from.
struct ParentRun {
  int64_t run_id = 0;  // the store's id (0 in a dry run that expanded the parent file locally)
  int64_t index = 0;   // within its sweep
  std::string name;    // "<sweep>/<index>"
  RunConfig config;
  std::map<std::string, std::string> params;  // every scalar key -> value
};
ParentRun AsParentRun(const ExpandedRun& run);

// The sweeps that derived jobs name in from.sweep, in file order, each once.
std::vector<std::string> ParentSweeps(const SweepSpec& spec);

// The data files the sweep's runs can name, without expanding it (a 10,000-run expansion costs
// seconds): the base's files, train_data values of the grid, the variants and derived `set`s,
// and the val_data and tasks of derived `set`s. Path -> whether it is a token file. Derived jobs
// of another sweep read their parents' train_data, which is not here.
std::map<std::string, bool> SweepDataPaths(const SweepSpec& spec);

// Expands grid × variants × seeds (grid keys vary slowest-first in file order, seeds fastest),
// then the
// derived jobs. Every run's config is validated; the error names the run's grid point.
// ResourceExhausted when the expansion exceeds max_runs, with the count, or max_bytes, naming the
// run that passed it and the bytes a run takes. parent_sweeps holds the
// trained runs of every sweep in ParentSweeps(spec) (NotFound names one that is missing).
absl::StatusOr<std::vector<ExpandedRun>> ExpandSweep(
    const SweepSpec& spec, std::string_view file,
    const std::map<std::string, std::vector<ParentRun>>& parent_sweeps = {});

}  // namespace cart::config
