#pragma once

// `cart plan`: for each claim the report cannot tell, the seeds per side that would decide it
// (docs/study.md "Planning seeds"): the effect to detect (the paper's, or the smallest of
// interest the user states), the spread of the seeds measured so far (or a stated prior where a
// side has fewer than two), the claim's strictest Holm level (α over its number of tests), and
// the power asked for give the seeds a t test needs (stats::SeedsForPower); the runs that adds and
// their RTX 3090 hours (config::EstimateRunCost of each side's config), claims ranked by hours per
// decision. Pure: reads a built Report.

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "report/report.h"

namespace cart::report {

struct PlanOptions {
  double power = 0.8;   // in (0, 1)
  double alpha = 0.05;  // the claim's family-wise level, in (0, 1)
  // Claim id -> the smallest effect worth detecting, in the test's units (percent for a
  // log-scale test); overrides the paper's effect.
  std::map<std::string, double> smallest_effect;
  // The spread of one seed (of a pair's difference for a paired test), in the test's own scale
  // (log values for a log-scale test), used where a side has fewer than two runs; NaN: none.
  double prior_sd = std::numeric_limits<double>::quiet_NaN();
};

// New runs of one config (one side of a test): how many, and what each costs.
struct SideSeeds {
  std::map<std::string, std::string> config;  // the side's keys, seed removed
  // A run of the side: its new seeds copy the training run it is or derives from (with that
  // run's derived jobs; Scheduler::ApplyPlan). 0: unknown.
  int64_t template_run = 0;
  int64_t runs = 0;
  double hours_each = 0;          // RTX 3090 hours (config::EstimateRunCost)
  int64_t memory_bytes_each = 0;  // the least device memory it trains in (config::MinTrainingBytes)
};

struct TestPlan {
  std::vector<SideSeeds> sides;  // each side's new runs
  std::string label;
  std::string design;     // "paired t", "Welch t", "one-sample t"
  int64_t seeds_now = 0;  // per side
  // Per side at the last look: the fixed design's seeds inflated for the looks (the claim's
  // earlier looks, this one, and the last), O'Brien–Fleming-like spending (stats::InflationFactor).
  int64_t seeds_needed = 0;
  int64_t fixed_seeds = 0;  // what a single look at the end would need
  int looks = 0;            // looks of the design, the last at seeds_needed
  int64_t runs = 0;         // new runs: the seeds each side lacks
  double hours = 0;         // their RTX 3090 hours
  double effect = 0;        // the effect planned for, in the test's units
  double sd = 0;            // the spread planned with, in the test's own scale
  bool prior = false;       // the spread is the stated prior
  std::string note;         // why it is not planned, when it is not
};

struct ClaimPlan {
  std::string id;
  std::string claim;
  std::vector<TestPlan> tests;  // the tests that cannot tell
  // Its new runs per config: a side shared by several of its tests counted once, at the most
  // seeds any of them needs.
  std::vector<SideSeeds> sides;
  int64_t runs = 0;
  double hours = 0;
  // The seeds per side the claim stands on now, the least over its compare and value tests (the
  // look a plan records; the report counts its looks the same way).
  int64_t seeds_now = 0;
  bool planned = false;  // every test that cannot tell has a plan
  std::string note;      // why not, when not
  // When its new runs would all have finished if queued now (Unix µs; cartd's placement plan over
  // the live fleet, filled in by `cart plan`); 0: unknown (no cartd, or no live worker fits).
  int64_t expected_finish_us = 0;
};

// The plans of the claims that cannot tell, cheapest decision first (the unplannable last, in
// the report's order). InvalidArgument for a power or alpha outside (0, 1), a negative or NaN
// prior, or a smallest effect for a claim the report does not have (the message names it and the
// claims there are).
absl::StatusOr<std::vector<ClaimPlan>> PlanSeeds(const Report& report, const PlanOptions& options);

}  // namespace cart::report
