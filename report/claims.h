#pragma once

// The paper's claims decided by the data: each claim (report/claims.yaml) names the runs and the
// metric it reads, the comparison it makes and its rule; DecideClaims computes, for each, the
// statistics of report/stats.h and a verdict — holds, does not hold, or cannot tell — with one
// line of evidence, and for "cannot tell" the smallest effect the data could have detected.
//
// The rule, for every test (docs/study.md, "Claims and verdicts"):
// - directional (less / greater): the test holds when the 95 % interval of the effect lies on the
//   claimed side of zero (two-sided p < 0.05 after Holm's correction over the claim's tests), and
//   does not hold when it lies on the other side; otherwise it cannot tell.
// - within a band or margin: holds when the interval lies inside, does not hold when it lies
//   wholly outside (each edge a one-sided test at 0.025, Holm-corrected); otherwise cannot tell.
// - trend: Spearman's ρ with its test, read as a directional test.
// A claim holds when all of its tests hold and does not hold when any does not. Only finished
// runs count; a seed that diverged (NaN) makes its comparison NaN: cannot tell, saying so.
// A test whose sides trained on disjoint sets of card models (every R = 2 run on 3050s, every
// R = 4 run on 3090s) is confounded with the device class: it cannot tell, and says so, instead
// of crediting the difference to the config (docs/architecture.md "Device classes").

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "report/report.h"

namespace cart::report {

// One side of a comparison: runs of a part, narrowed by config values.
struct ArmSpec {
  std::string part;  // empty: the claim's part
  // Config key -> a value, "@min" / "@max" (the extreme value among the runs left) or "@best"
  // (the value with the lowest mean metric); applied in order.
  std::vector<std::pair<std::string, std::string>> match;
  // Empty: the metric's last value. A number, or "@R" (the run's R): that step of its series.
  std::string step;
};

struct TestSpec {
  enum class Kind { kCompare, kValue, kTrend, kBestAt };
  enum class Direction { kLess, kGreater, kWithin };
  Kind kind = Kind::kCompare;
  std::string label;
  std::string metric;  // "{val}" and "{floor}" are filled in per report / per run
  ArmSpec a, b;        // b: compare only
  Direction direction = Direction::kLess;
  bool log_scale = false;              // compare log values; effects in percent
  double reference = 0;                // value: against this number ...
  std::string reference_metric;        // ... or against this metric of the same run
  bool has_reference = false;          // `reference` was given
  double band_low = 0, band_high = 0;  // value within
  double margin = 0;                   // compare within: ± this (percent with log_scale)
  std::vector<std::string> per;        // one test per value of these keys
  std::string against;                 // trend: the x axis
  bool every_run = false;              // value: every run on the claimed side too
  double published_effect = 0;         // in the test's units
  bool has_published_effect = false;
  std::string at;  // best_at: "@R" or a step
};

struct ClaimSpec {
  std::string id;
  std::string claim, section, published, part;
  std::vector<TestSpec> tests;
  int line = 0;  // in the claims file, 1-based
};

// Parses a claims file. InvalidArgument names the file, the line and the field, with the allowed
// values (an unknown key, a kind or direction that does not exist, a test missing what its kind
// needs).
absl::StatusOr<std::vector<ClaimSpec>> ParseClaims(const std::string& text,
                                                   const std::string& file_name);
// The compiled-in claims (report/claims.yaml), parsed once; report_test checks they parse.
absl::StatusOr<std::vector<ClaimSpec>> DefaultClaims();

enum class Verdict { kHolds, kDoesNotHold, kCannotTell };
const char* VerdictName(Verdict v);  // "holds", "does not hold", "cannot tell"

// One computed test (a test with `per` or best_at gives several).
struct TestOutcome {
  std::string label;    // the spec's label with what `per` and the selectors chose
  std::string method;   // "paired t", "Welch t", "one-sample t", "Spearman"
  std::string unit;     // "%", or "" for the metric's own unit
  bool level = false;   // the effect is the metric's value (within a band), not a difference
  bool within = false;  // a band or margin: p is "inside" unless the test does not hold
  double effect = 0, low = 0, high = 0;  // low, high: NaN for trends and without spread
  // Two-sided, uncorrected; within a band or margin: the p of "inside" (two one-sided tests).
  double p = 0;
  double p_holm = 0;      // the decisive p after Holm's correction
  int64_t n = 0, n2 = 0;  // pairs / sample / first arm; second arm (Welch)
  double detectable = 0;  // smallest effect detectable at 80 % power; NaN: none
  double published = 0;   // the paper's effect in these units; NaN: none
  Verdict verdict = Verdict::kCannotTell;
  std::string note;  // why nothing could be computed, when so
  // The card models each side's runs trained on ("a: RTX 3090 ×3; b: RTX 3050 ×3"; a trend's
  // by its x value); empty when no run's class is known (docs/architecture.md "Device classes").
  std::string device_classes;
  // Two sides trained on disjoint sets of card models while more than one model is present:
  // the difference cannot be told from the card's, so the test cannot tell, whatever its p.
  bool confounded = false;
  // What the planner needs (report/plan.h), in the test's own scale (log values for a log-scale
  // test): the kind ("compare", "value", "trend", "best_at"), whether a compare paired its runs by
  // seed, the standard error behind the effect (NaN: fewer than two runs), the paper's effect
  // (NaN: none), and each side's config (its first run's keys less the seed; one side for a
  // value test).
  std::string kind;
  bool paired = false;
  bool log_scale = false;
  double se_raw = std::numeric_limits<double>::quiet_NaN();
  // The estimate behind `effect` in the same scale (a difference, or the distance from the
  // reference), and the side the claim is on: +1 greater, −1 less, 0 within a band or margin.
  double effect_raw = std::numeric_limits<double>::quiet_NaN();
  // Tested over items (each item's outcome, paired; n = items, n2 = seeds), not over runs.
  bool over_items = false;
  int claimed_sign = 0;
  double published_raw = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::map<std::string, std::string>> arms;
  std::vector<int64_t> arm_runs;  // each side's first run (its id), beside `arms`
};

struct ClaimOutcome {
  const ClaimSpec* spec = nullptr;
  SequentialStatus sequential;
  // The seeds per side it stands on, the least over its compare and value tests (0: none): what
  // its looks count and a plan records.
  int64_t seeds = 0;
  Verdict verdict = Verdict::kCannotTell;
  bool confounded = false;  // a test of it is confounded with the device class
  std::string evidence;     // one line: the decisive test's numbers
  std::vector<TestOutcome> tests;
  // Every run its tests' sides selected, in any state, by id: what the evidence cost.
  std::vector<const StudyRun*> runs;
};

// The runs of each part, as the report read them (part name -> runs; variable_r: its
// evaluation jobs), and the report's validation set.
struct ClaimInputs {
  std::map<std::string, std::vector<const StudyRun*>> parts;
  std::string val_set;
  // Claim id -> its looks recorded by seed plans, oldest first: such a claim is decided at its
  // current look's group-sequential boundary instead of at the fixed level.
  std::map<std::string, std::vector<ClaimLook>> looks;
  double futility_floor = 0.1;
};

// Decides every claim. Errors only when the source fails (a series read).
absl::StatusOr<std::vector<ClaimOutcome>> DecideClaims(StudySource& source,
                                                       const std::vector<ClaimSpec>& claims,
                                                       const ClaimInputs& inputs);

// The evidence line of one test: "perplexity, R = 4 − R = 2: −0.41 % [−0.62, −0.20], paired t,
// n = 3, p = 0.012", with the detectable effect and the published one beside a "cannot tell".
std::string Evidence(const TestOutcome& t);

}  // namespace cart::report
