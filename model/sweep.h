#pragma once

// Sweep files (YAML): a base run config, a grid over any config key, seeds, priority, retry budget
// and derived jobs, expanded into runs. No Torch, no gRPC: `cart sweep submit --dry-run` and cartd
// run this same code.
//
//   name: stage1
//   base: {d: 256, P: 2, R: 2, steps: 3000, seq_len: 512, train_data: mix.bin}
//   grid: {d: [256, 512, 768, 1024], R: [2, 4, 6, 8], P: [2, 3, 4, 6]}
//   seeds: [42]
//   priority: 10          # higher runs first
//   max_attempts: 3       # attempts per run before FAILED
//   max_runs: 10000       # refuse a grid that expands past this
//   derived:
//     - name: varR        # one eval job per matching parent
//       kind: eval        # eval | train
//       from: {match: {R: 6}, checkpoint: final}   # or {run: 3, checkpoint: 1500}
//       eval_loops: [1, 2, 4, 6, 8, 16]
//       set: {R_infer: 6} # config overrides for the derived job

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"

namespace cart::model {

struct DerivedSpec {
  std::string name;
  std::string kind = "eval";                             // "eval" or "train"
  std::map<std::string, std::string> match;              // parents whose params have these values
  int64_t run_index = -1;                                // or one parent by index (>= 0)
  int64_t checkpoint_step = -1;                          // -1: the parent's final checkpoint
  std::vector<int> eval_loops;                           // eval: R_infer values, 1..16
  std::vector<std::pair<std::string, std::string>> set;  // config overrides
};

struct SweepSpec {
  std::string name;
  std::string base_yaml;  // the `base` mapping as YAML text
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;  // key -> values, file order
  std::vector<int64_t> seeds = {42};
  int64_t priority = 0;
  int64_t max_attempts = 3;
  int64_t max_runs = 10000;
  std::vector<DerivedSpec> derived;
};

struct ExpandedRun {
  int64_t index = 0;                          // 0-based within the sweep
  std::string name;                           // "<sweep>/<index>"
  std::string kind = "train";                 // "train" or "eval"
  RunConfig config;                           // resolved
  std::string config_yaml;                    // ToYaml(config)
  std::map<std::string, std::string> params;  // every scalar key -> value (the pivot keys)
  int64_t stored_params = 0;
  int64_t effective_params = 0;
  int64_t memory_estimate_bytes = 0;    // per micro-batch training estimate (EstimateTrainingBytes)
  int64_t min_memory_bytes = 0;         // the estimate at micro-batch 1 (MinTrainingBytes)
  int64_t parent_index = -1;            // derived jobs: index of the parent run
  int64_t parent_checkpoint_step = -1;  // -1: the parent's final checkpoint
  std::vector<int> eval_loops;
};

// Parses a sweep file. InvalidArgument "<file>:<line>: <key>: <reason>" for unknown keys, bad
// values and invalid combinations (the message lists allowed values).
absl::StatusOr<SweepSpec> ParseSweepYaml(std::string_view text, std::string_view file);

// Expands grid × seeds (grid keys vary slowest-first in file order, seeds fastest), then the
// derived jobs. Every run's config is validated; the error names the run's grid point.
// ResourceExhausted when the expansion exceeds max_runs, with the count.
absl::StatusOr<std::vector<ExpandedRun>> ExpandSweep(const SweepSpec& spec, std::string_view file);

}  // namespace cart::model
