// The claims decided: each test's runs selected, its statistics computed and Holm's correction
// (or a sequential design's boundary) applied per claim (report/claims.h; the file is parsed in
// claims_file.cc, the evidence line written in claims_evidence.cc).

#include "report/claims.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "config/devices.h"
#include "report/internal/select.h"
#include "report/sequential.h"
#include "report/stats.h"

namespace cart::report {
namespace {

using internal::Distinct;
using internal::Param;
using internal::Runs;
using internal::Where;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kAlpha = 0.05;

// ---- Deciding -----------------------------------------------------------------------------

// The test's p-values for its claim and against it; NaN when the test could not be computed.
struct Sides {
  double p_for = kNaN, p_against = kNaN;
};

// A directional reading of a two-sided p-value: it counts for the claim when the estimate lies
// on the claimed side of the null.
Sides Directional(double value, double null, double p, TestSpec::Direction d) {
  if (std::isnan(p) || std::isnan(value)) return {};
  if (value == null) return {1, 1};
  const bool claimed = (value < null) == (d == TestSpec::Direction::kLess);
  return claimed ? Sides{p, 1} : Sides{1, p};
}

// Inside [low, high]: both edges one-sided at level α / 2 (the 95 % interval inside); outside:
// the nearer edge one-sided (the interval wholly beyond it).
Sides Within(const stats::Estimate& e, double low, double high) {
  if (std::isnan(e.se) || std::isnan(e.df) || std::isnan(e.value)) return {};
  auto cdf = [&](double x) {
    if (e.se == 0) return x > 0 ? 1.0 : x < 0 ? 0.0 : 0.5;
    return stats::StudentTCdf(x / e.se, e.df);
  };
  const double above_low = 1 - cdf(e.value - low);  // p of "the true value is at or below low"
  const double below_high = cdf(e.value - high);
  Sides s;
  s.p_for = std::min(1.0, 2 * std::max(above_low, below_high));
  if (e.value < low) {
    s.p_against = std::min(1.0, 2 * cdf(e.value - low));
  } else if (e.value > high) {
    s.p_against = std::min(1.0, 2 * (1 - cdf(e.value - high)));
  } else {
    s.p_against = 1;
  }
  return s;
}

double Percent(double log_ratio) { return (std::exp(log_ratio) - 1) * 100; }

// The values of an arm's finished runs, with their seeds for pairing.
struct Sample {
  std::vector<double> values;
  std::vector<std::string> seeds;  // "" where a run has no seed
  std::vector<const StudyRun*> runs;
};

// Device classes per side of a test (docs/architecture.md "Device classes"): the text that
// names them, and whether two sides trained on disjoint sets of models while more than one model
// is present. `sides`: label -> runs; a run of unknown class counts for none.
void NoteDeviceClasses(
    const std::vector<std::pair<std::string, std::vector<const StudyRun*>>>& sides,
    TestOutcome& o) {
  std::vector<std::set<std::string>> sets;
  std::set<std::string> all;
  std::string text;
  for (const auto& [label, runs] : sides) {
    std::map<std::string, int64_t> count;
    for (const StudyRun* r : runs) {
      for (const std::string& c : r->device_classes) ++count[c];
    }
    std::set<std::string> set;
    std::string part;
    for (const auto& [c, n] : count) {
      set.insert(c);
      part += fmt::format("{}{} ×{}", part.empty() ? "" : ", ", config::ShortDeviceName(c), n);
    }
    if (!set.empty()) {
      text +=
          fmt::format("{}{}{}", text.empty() ? "" : "; ", label.empty() ? "" : label + ": ", part);
      sets.push_back(set);
      all.insert(set.begin(), set.end());
    }
  }
  o.device_classes = text;
  if (all.size() < 2) return;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (size_t j = i + 1; j < sets.size(); ++j) {
      const bool disjoint = std::none_of(sets[i].begin(), sets[i].end(),
                                         [&](const std::string& c) { return sets[j].count(c); });
      if (disjoint) o.confounded = true;
    }
  }
  if (o.confounded) {
    o.note = fmt::format(
        "{}confounded with the device class ({}): the sides trained on "
        "different card models, so the difference cannot be credited to the "
        "config",
        o.note.empty() ? "" : o.note + "; ", text);
  }
}

class Decider {
 public:
  Decider(StudySource& source, const ClaimInputs& inputs) : source_(source), inputs_(inputs) {}

  absl::StatusOr<ClaimOutcome> Decide(const ClaimSpec& claim) {
    ClaimOutcome out;
    out.spec = &claim;
    selected_.clear();
    std::vector<Sides> sides;
    std::vector<bool> every_run_ok;
    for (const TestSpec& t : claim.tests) {
      for (const auto& fixed : Expand(t, claim.part)) {
        CART_RETURN_IF_ERROR(Run(t, claim.part, fixed, out.tests, sides, every_run_ok));
      }
    }
    std::vector<double> p_for, p_against;
    for (const Sides& s : sides) {
      p_for.push_back(s.p_for);
      p_against.push_back(s.p_against);
    }
    const std::vector<double> adj_for = stats::Holm(p_for), adj_against = stats::Holm(p_against);
    // A claim a seed plan was applied to is decided at its look's group-sequential levels.
    std::vector<bool> seq_for, seq_against;
    auto looks = inputs_.looks.find(claim.id);
    out.seeds = ClaimSeeds(out.tests);
    if (looks != inputs_.looks.end() && !looks->second.empty()) {
      out.sequential = Look(looks->second, out.seeds, out.tests.size());
    }
    const std::optional<stats::SequentialHolm> holm =
        out.sequential.sequential
            ? std::optional<stats::SequentialHolm>(stats::SequentialHolm(
                  Fractions(out.sequential), out.sequential.alpha, Spending(looks->second.back()),
                  static_cast<int>(out.tests.size())))
            : std::nullopt;
    if (holm) {
      seq_for = StepDown(*holm, out.sequential.look - 1, p_for);
      seq_against = StepDown(*holm, out.sequential.look - 1, p_against);
    }
    bool all_hold = !out.tests.empty(), any_not = false;
    for (size_t i = 0; i < out.tests.size(); ++i) {
      TestOutcome& t = out.tests[i];
      const bool decided_for = holm ? seq_for[i] : adj_for[i] < kAlpha;
      const bool decided_against = holm ? seq_against[i] : adj_against[i] < kAlpha;
      if (decided_for && every_run_ok[i]) {
        t.verdict = Verdict::kHolds;
        t.p_holm = adj_for[i];
      } else if (decided_against) {
        t.verdict = Verdict::kDoesNotHold;
        t.p_holm = adj_against[i];
        if (t.within) t.p = sides[i].p_against;  // "wholly outside" decided it
      } else {
        t.verdict = Verdict::kCannotTell;
        // Within a margin the p shown is the one for "inside" (the claim's side): its Holm value
        // goes with it, not the smaller one of "wholly outside".
        t.p_holm = std::isnan(adj_for[i]) ? kNaN
                   : t.within             ? adj_for[i]
                                          : std::min(adj_for[i], adj_against[i]);
      }
      if (t.confounded) {
        t.verdict = Verdict::kCannotTell;
        out.confounded = true;
      }
      all_hold = all_hold && t.verdict == Verdict::kHolds;
      any_not = any_not || t.verdict == Verdict::kDoesNotHold;
    }
    out.verdict = any_not    ? Verdict::kDoesNotHold
                  : all_hold ? Verdict::kHolds
                             : Verdict::kCannotTell;
    if (out.sequential.sequential) {
      out.sequential.crossed = std::any_of(out.tests.begin(), out.tests.end(), [](const auto& t) {
        return t.verdict != Verdict::kCannotTell;
      });
      if (out.verdict == Verdict::kCannotTell) Futility(out, looks->second.back());
    }
    // The decisive test: the first that does not hold; the weakest that holds; the first that
    // cannot tell.
    const TestOutcome* decisive = nullptr;
    for (const TestOutcome& t : out.tests) {
      if (t.verdict != out.verdict) continue;
      if (decisive == nullptr || (out.verdict == Verdict::kHolds && t.p_holm > decisive->p_holm)) {
        decisive = &t;
      }
      if (out.verdict != Verdict::kHolds) break;
    }
    out.evidence = decisive != nullptr ? Evidence(*decisive) : "no test could be computed";
    for (const auto& [id, run] : selected_) out.runs.push_back(run);
    return out;
  }

 private:
  using Fixed = std::vector<std::pair<std::string, std::string>>;

  static stats::Spending Spending(const ClaimLook& look) {
    return look.spending == "pocock" ? stats::Spending::kPocock : stats::Spending::kOBrienFleming;
  }

  // The information fractions of the looks so far, this one last.
  static std::vector<double> Fractions(const SequentialStatus& s) {
    std::vector<double> out;
    for (int64_t n : s.look_seeds) {
      out.push_back(static_cast<double>(n) / static_cast<double>(s.seeds_target));
    }
    return out;
  }

  // The seeds per side a test has now: its pairs or sample, the smaller arm of two.
  // The seeds per side a claim stands on: the least over its compare and value tests of their
  // pairs or sample, the smaller arm of two, the seeds of a test over items; 0: none.
  static int64_t ClaimSeeds(const std::vector<TestOutcome>& tests) {
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const TestOutcome& t : tests) {
      if (t.kind != "compare" && t.kind != "value") continue;
      least = std::min(least, t.over_items            ? std::max<int64_t>(1, t.n2)
                              : t.paired || t.n2 == 0 ? t.n
                                                      : std::min(t.n, t.n2));
    }
    return least == std::numeric_limits<int64_t>::max() ? 0 : least;
  }

  // Where the claim stands: the looks the plans recorded (their seeds), then this one when its
  // seeds are more than the last look's; the target the last plan's, or the seeds now when past.
  static SequentialStatus Look(const std::vector<ClaimLook>& looks, int64_t now, size_t tests) {
    SequentialStatus s;
    if (now < 1) return s;  // nothing to look at
    for (const ClaimLook& l : looks) {
      if (l.seeds_now >= 1 && (s.look_seeds.empty() || l.seeds_now > s.look_seeds.back()) &&
          l.seeds_now <= now) {
        s.look_seeds.push_back(l.seeds_now);
      }
    }
    if (s.look_seeds.empty() || now > s.look_seeds.back()) s.look_seeds.push_back(now);
    s.seeds_target = std::max(looks.back().seeds_target, now);
    s.awaiting = now <= looks.back().seeds_now && looks.back().pending > 0;
    s.plan_id = looks.back().plan_id;
    s.alpha = looks.back().alpha;
    s.sequential = true;
    s.look = static_cast<int>(s.look_seeds.size());
    const std::vector<double> fractions = Fractions(s);
    s.fraction = fractions.back();
    const stats::Spending spending = Spending(looks.back());
    s.alpha_spent = stats::SpentAlpha(spending, s.alpha, s.fraction);
    const int m = std::max<int>(1, static_cast<int>(tests));
    const std::vector<double> bounds =
        stats::SequentialBoundaries(fractions, s.alpha / m, spending);
    s.boundary = bounds.empty() ? kNaN : bounds.back();
    s.nominal = bounds.empty() ? kNaN : stats::NominalLevel(s.boundary);
    s.conditional_power = kNaN;
    return s;
  }

  // Holm's step-down at a sequential look: by ascending p, the r-th (r decided before it) is
  // decided while its p is below the look's level for α / (m − r).
  static std::vector<bool> StepDown(const stats::SequentialHolm& holm, int look,
                                    const std::vector<double>& p) {
    const int m = static_cast<int>(p.size());
    std::vector<int> order;
    for (int i = 0; i < m; ++i) {
      if (!std::isnan(p[i])) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] < p[b]; });
    std::vector<bool> out(p.size(), false);
    int r = 0;
    for (int i : order) {
      if (!(p[i] < holm.Level(look, m - r))) break;
      out[i] = true;
      ++r;
    }
    return out;
  }

  // Conditional power of each test that cannot tell: the chance that, by the planned seeds, its
  // statistic crosses the last boundary, given where it is now and drifting at the paper's
  // effect (B-value reasoning: Z at the end is B(t) + θ(1 − t) plus noise of variance 1 − t).
  void Futility(ClaimOutcome& out, const ClaimLook& last) const {
    SequentialStatus& s = out.sequential;
    if (!(s.fraction < 1)) return;
    std::vector<double> planned = Fractions(s);
    planned.push_back(1);
    const int m = std::max<int>(1, static_cast<int>(out.tests.size()));
    const std::vector<double> bounds =
        stats::SequentialBoundaries(planned, s.alpha / m, Spending(last));
    if (bounds.empty()) return;
    const double c = bounds.back(), t = s.fraction;
    double least = kNaN;
    for (const TestOutcome& o : out.tests) {
      if (o.verdict != Verdict::kCannotTell || o.claimed_sign == 0) continue;
      if (!(o.se_raw > 0) || std::isnan(o.published_raw) || std::isnan(o.effect_raw)) continue;
      const double z = o.claimed_sign * o.effect_raw / o.se_raw;
      const double drift = std::abs(o.published_raw) / (o.se_raw * std::sqrt(t));
      const double cp = 0.5 * std::erfc((c - z * std::sqrt(t) - drift * (1 - t)) /
                                        std::sqrt(1 - t) / std::sqrt(2.0));
      if (std::isnan(least) || cp < least) least = cp;
    }
    s.conditional_power = least;
    s.futile = !std::isnan(least) && least < inputs_.futility_floor;
  }

  Runs PartRuns(const std::string& part) const {
    auto it = inputs_.parts.find(part);
    return it == inputs_.parts.end() ? Runs{} : it->second;
  }

  // One set of fixed config values per combination of the `per` keys' values.
  std::vector<Fixed> Expand(const TestSpec& t, const std::string& claim_part) const {
    std::vector<Fixed> out = {Fixed{}};
    const Runs runs = PartRuns(t.a.part.empty() ? claim_part : t.a.part);
    for (const std::string& key : t.per) {
      std::vector<Fixed> next;
      for (const Fixed& f : out) {
        for (const std::string& v : Distinct(runs, key)) {
          Fixed g = f;
          g.emplace_back(key, v);
          next.push_back(std::move(g));
        }
      }
      out = std::move(next);
    }
    return out;
  }

  std::string MetricFor(const std::string& metric, const StudyRun& r) const {
    std::string m = metric;
    auto fill = [&](const std::string& key, const std::string& value) {
      for (size_t at = m.find(key); at != std::string::npos; at = m.find(key)) {
        m.replace(at, key.size(), value);
      }
    };
    fill("{val}", inputs_.val_set);
    if (m.find("{floor}") != std::string::npos) {
      std::string set;
      for (const auto& [name, v] : r.values) {
        if (name.rfind("entropy_floor/", 0) == 0) set = name.substr(14);
      }
      fill("{floor}", set);
    }
    return m;
  }

  absl::StatusOr<const std::vector<StudyPoint>*> SeriesOf(const StudyRun& r,
                                                          const std::string& metric) {
    auto key = std::make_pair(r.id, metric);
    auto it = series_.find(key);
    if (it == series_.end()) {
      CART_ASSIGN_OR_RETURN(std::vector<StudyPoint> points, source_.Series(r.id, metric, 0));
      it = series_.emplace(key, std::move(points)).first;
    }
    return &it->second;
  }

  // A finished run's metric at the arm's step (its last value without one); nullopt when the run
  // never logged it there.
  absl::StatusOr<std::optional<double>> ValueOf(const StudyRun& r, const std::string& metric,
                                                const std::string& step) {
    const std::string m = MetricFor(metric, r);
    if (step.empty()) {
      auto it = r.values.find(m);
      if (it == r.values.end()) return std::optional<double>();
      return std::optional<double>(it->second);
    }
    const std::optional<int64_t> at = step == "@R" ? ParseInt64(Param(r, "R")) : ParseInt64(step);
    if (!at) return std::optional<double>();
    CART_ASSIGN_OR_RETURN(const std::vector<StudyPoint>* points, SeriesOf(r, m));
    for (const StudyPoint& p : *points) {
      if (p.step == *at) return std::optional<double>(p.value);
    }
    return std::optional<double>();
  }

  absl::StatusOr<Sample> SampleOf(const Runs& runs, const std::string& metric,
                                  const std::string& step) {
    Sample s;
    for (const StudyRun* r : runs) {
      if (!r->finished) continue;
      CART_ASSIGN_OR_RETURN(std::optional<double> v, ValueOf(*r, metric, step));
      if (!v) continue;
      s.values.push_back(*v);
      s.seeds.push_back(Param(*r, "seed"));
      s.runs.push_back(r);
    }
    return s;
  }

  // The arm's runs: the part's, narrowed by the fixed values and then by each match in order.
  // `chosen` gets "KEY = VALUE" for each selector resolved.
  absl::StatusOr<Runs> Select(const ArmSpec& arm, const std::string& claim_part, const Fixed& fixed,
                              const std::string& metric, std::vector<std::string>& chosen) {
    Runs runs = PartRuns(arm.part.empty() ? claim_part : arm.part);
    for (const auto& [k, v] : fixed) runs = Where(runs, {{k, v}});
    for (const auto& [key, want] : arm.match) {
      std::string value = want;
      if (want == "@min" || want == "@max") {
        const std::vector<std::string> values = Distinct(runs, key);
        if (values.empty()) return Runs{};
        value = want == "@min" ? values.front() : values.back();
        chosen.push_back(fmt::format("{} = {}", key, value));
      } else if (want == "@best") {
        double best = kNaN;
        for (const std::string& v : Distinct(runs, key)) {
          CART_ASSIGN_OR_RETURN(Sample s, SampleOf(Where(runs, {{key, v}}), metric, arm.step));
          if (s.values.empty()) continue;
          double mean = 0;
          for (double x : s.values) mean += x / static_cast<double>(s.values.size());
          if (std::isnan(mean)) continue;
          if (std::isnan(best) || mean < best) best = mean, value = v;
        }
        if (std::isnan(best)) return Runs{};
        chosen.push_back(fmt::format("{} = {} (best)", key, value));
      }
      runs = Where(runs, {{key, value}});
    }
    for (const StudyRun* r : runs) selected_.emplace(r->id, r);
    return runs;
  }

  // Pairs two samples by seed when every run of both has one and the seeds are the same set,
  // each once: the paired test needs nothing else.
  static bool PairBySeed(const Sample& a, const Sample& b, std::vector<double>& pa,
                         std::vector<double>& pb) {
    if (a.values.size() != b.values.size() || a.values.size() < 2) return false;
    std::map<std::string, double> by_seed;
    for (size_t i = 0; i < a.values.size(); ++i) {
      if (a.seeds[i].empty() || !by_seed.emplace(a.seeds[i], a.values[i]).second) return false;
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < b.values.size(); ++i) {
      auto it = by_seed.find(b.seeds[i]);
      if (it == by_seed.end() || !seen.insert(b.seeds[i]).second) return false;
      pa.push_back(it->second);
      pb.push_back(b.values[i]);
    }
    return true;
  }

  static std::vector<double> Logs(std::vector<double> v) {
    for (double& x : v) x = x > 0 ? std::log(x) : kNaN;
    return v;
  }

  static std::string Suffix(const Fixed& fixed, const std::vector<std::string>& chosen) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : fixed) parts.push_back(fmt::format("{} = {}", k, v));
    parts.insert(parts.end(), chosen.begin(), chosen.end());
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? " (" : ", ") + p;
    return out.empty() ? out : out + ")";
  }

  // What the two arms' selectors chose: the choices both made once, then "A against B".
  static std::vector<std::string> Against(const std::vector<std::string>& a,
                                          const std::vector<std::string>& b) {
    std::vector<std::string> common, only_a, only_b;
    for (const std::string& x : a) {
      (std::find(b.begin(), b.end(), x) != b.end() ? common : only_a).push_back(x);
    }
    for (const std::string& x : b) {
      if (std::find(a.begin(), a.end(), x) == a.end()) only_b.push_back(x);
    }
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
      return out;
    };
    if (!only_a.empty() && !only_b.empty()) {
      common.push_back(fmt::format("{} against {}", join(only_a), join(only_b)));
    } else if (!only_a.empty()) {
      common.push_back(join(only_a));
    } else if (!only_b.empty()) {
      common.push_back("against " + join(only_b));
    }
    return common;
  }

  // Fills an outcome from an estimate in the test's scale, as its distance from `origin`.
  static void FromEstimate(TestOutcome& o, const stats::Estimate& e, bool log_scale,
                           double origin = 0) {
    auto shown = [&](double x) { return log_scale ? Percent(x - origin) : x - origin; };
    o.effect = shown(e.value);
    o.low = shown(e.low);
    o.high = shown(e.high);
    o.p = e.p;
    o.n = e.n;
    o.n2 = e.n2;
    const double mde = stats::DetectableEffect(e.se, e.df);
    o.detectable = log_scale ? Percent(mde) : mde;
    o.unit = log_scale ? "%" : "";
  }

  absl::Status Run(const TestSpec& t, const std::string& claim_part, const Fixed& fixed,
                   std::vector<TestOutcome>& outcomes, std::vector<Sides>& sides,
                   std::vector<bool>& every_run_ok) {
    std::vector<std::string> chosen, b_chosen;
    CART_ASSIGN_OR_RETURN(Runs a_runs, Select(t.a, claim_part, fixed, t.metric, chosen));
    TestOutcome o;
    o.effect = o.low = o.high = o.p = o.p_holm = o.detectable = kNaN;
    o.published = t.has_published_effect ? t.published_effect : kNaN;
    o.log_scale = t.log_scale;
    o.published_raw = !t.has_published_effect ? kNaN
                      : t.log_scale           ? std::log1p(t.published_effect / 100)
                                              : t.published_effect;
    o.claimed_sign = t.direction == TestSpec::Direction::kGreater ? 1
                     : t.direction == TestSpec::Direction::kLess  ? -1
                                                                  : 0;
    o.kind = t.kind == TestSpec::Kind::kCompare ? "compare"
             : t.kind == TestSpec::Kind::kValue ? "value"
             : t.kind == TestSpec::Kind::kTrend ? "trend"
                                                : "best_at";
    auto add = [&](TestOutcome outcome, Sides s, bool every_ok) {
      outcomes.push_back(std::move(outcome));
      sides.push_back(s);
      every_run_ok.push_back(every_ok);
    };
    if (t.kind == TestSpec::Kind::kBestAt) return BestAt(t, a_runs, fixed, chosen, o, add);
    CART_ASSIGN_OR_RETURN(Sample a, SampleOf(a_runs, t.metric, t.a.step));
    if (a.values.empty()) {
      o.label = t.label + Suffix(fixed, chosen);
      o.note = "no finished run with this metric";
      add(o, {}, false);
      return absl::OkStatus();
    }
    switch (t.kind) {
      case TestSpec::Kind::kCompare: {
        CART_ASSIGN_OR_RETURN(Runs b_runs, Select(t.b, claim_part, fixed, t.metric, b_chosen));
        CART_ASSIGN_OR_RETURN(Sample b, SampleOf(b_runs, t.metric, t.b.step));
        o.label = t.label + Suffix(fixed, Against(chosen, b_chosen));
        if (b.values.empty()) {
          o.note = "no finished run with this metric on the second side";
          add(o, {}, false);
          return absl::OkStatus();
        }
        std::vector<double> pa, pb;
        // Two arms scored on the same items (a zero-shot task) pair their items as well.
        CART_ASSIGN_OR_RETURN(std::optional<stats::Estimate> by_items, CompareItems(t, a, b, o));
        const bool paired = by_items.has_value() || PairBySeed(a, b, pa, pb);
        if (!paired) pa = a.values, pb = b.values;
        if (t.log_scale) pa = Logs(pa), pb = Logs(pb);
        const stats::Estimate e = by_items ? *by_items
                                  : paired ? stats::PairedDifference(pa, pb)
                                           : stats::WelchDifference(pa, pb);
        if (!by_items) o.method = paired ? "paired t" : "Welch t";
        o.over_items = by_items.has_value();
        o.paired = paired;
        o.se_raw = e.se;
        o.effect_raw = e.value;
        o.arms = {ArmConfig(a.runs), ArmConfig(b.runs)};
        o.arm_runs = {ArmRun(a.runs), ArmRun(b.runs)};
        FromEstimate(o, e, t.log_scale);
        Sides s;
        if (t.direction == TestSpec::Direction::kWithin) {
          const double low = t.log_scale ? std::log1p(-t.margin / 100) : -t.margin;
          const double high = t.log_scale ? std::log1p(t.margin / 100) : t.margin;
          s = Within(e, low, high);
          // The p that decides "inside": the larger of the two one-sided tests, doubled.
          o.p = s.p_for;
          o.within = true;
          o.method += fmt::format(", inside ±{:g}{}", t.margin, t.log_scale ? " %" : "");
        } else {
          s = Directional(e.value, 0, e.p, t.direction);
        }
        if (std::isnan(e.p) && o.note.empty()) o.note = NoSpread(e);
        NoteDeviceClasses({{"a", a.runs}, {"b", b.runs}}, o);
        add(o, s, true);
        return absl::OkStatus();
      }
      case TestSpec::Kind::kValue: {
        o.label = t.label + Suffix(fixed, chosen);
        std::vector<double> x = a.values;
        double null = t.reference;
        if (!t.reference_metric.empty()) {
          null = 0;
          for (size_t i = 0; i < x.size(); ++i) {
            CART_ASSIGN_OR_RETURN(std::optional<double> ref,
                                  ValueOf(*a.runs[i], t.reference_metric, t.a.step));
            x[i] = ref ? x[i] - *ref : kNaN;
          }
        }
        if (t.log_scale) {
          x = Logs(x);
          null = std::log(null);
        }
        const bool within = t.direction == TestSpec::Direction::kWithin;
        const stats::Estimate e = stats::Mean(x, within ? 0.0 : null);
        o.method = "one-sample t";
        o.se_raw = e.se;
        o.effect_raw = within ? kNaN : e.value - null;
        o.arms = {ArmConfig(a.runs)};
        o.arm_runs = {ArmRun(a.runs)};
        // Within a band the effect is the value itself; against a reference, the distance.
        FromEstimate(o, e, t.log_scale && !within, within ? 0.0 : null);
        Sides s;
        bool every_ok = true;
        if (t.direction == TestSpec::Direction::kWithin) {
          s = Within(e, t.band_low, t.band_high);
          o.unit = "";
          o.level = true;
          o.within = true;
          o.p = s.p_for;
          o.method += fmt::format(", inside [{:g}, {:g}]", t.band_low, t.band_high);
        } else {
          s = Directional(e.value, null, e.p, t.direction);
          int64_t on_side = 0;
          for (double v : x) {
            on_side += t.direction == TestSpec::Direction::kLess ? v < null : v > null;
          }
          every_ok = !t.every_run || on_side == static_cast<int64_t>(x.size());
          if (t.every_run && !every_ok) {
            o.note = fmt::format("{} of {} runs on the claimed side", on_side, x.size());
          }
        }
        if (std::isnan(e.p) && o.note.empty()) o.note = NoSpread(e);
        NoteDeviceClasses({{"", a.runs}}, o);
        add(o, s, every_ok);
        return absl::OkStatus();
      }
      case TestSpec::Kind::kTrend: {
        o.label = t.label + Suffix(fixed, chosen);
        std::vector<double> x, y;
        for (size_t i = 0; i < a.values.size(); ++i) {
          x.push_back(ParseDouble(Param(*a.runs[i], t.against)).value_or(kNaN));
          y.push_back(a.values[i]);
        }
        const stats::Correlation c = stats::Spearman(x, y);
        o.method = "Spearman";
        o.effect = c.r;
        o.p = c.p;
        o.n = c.n;
        o.detectable = DetectableCorrelation(c.n);
        if (std::isnan(c.p)) {
          o.note = c.n < 3 ? fmt::format("{} runs: a rank correlation needs 3", c.n)
                           : "a constant side: no rank correlation";
        }
        std::map<double, std::vector<const StudyRun*>> by_x;
        for (size_t i = 0; i < x.size(); ++i) {
          if (!std::isnan(x[i])) by_x[x[i]].push_back(a.runs[i]);  // NaN: no such key
        }
        std::vector<std::pair<std::string, std::vector<const StudyRun*>>> groups;
        for (const auto& [value, runs] : by_x) {
          groups.emplace_back(fmt::format("{} = {:g}", t.against, value), runs);
        }
        NoteDeviceClasses(groups, o);
        add(o, Directional(c.r, 0, c.p, t.direction), true);
        return absl::OkStatus();
      }
      case TestSpec::Kind::kBestAt:
        break;
    }
    return absl::OkStatus();
  }

  // best_at: each other step of the series against the claimed one, paired by run, and claimed
  // higher there.
  template <typename Add>
  absl::Status BestAt(const TestSpec& t, const Runs& runs, const Fixed& fixed,
                      const std::vector<std::string>& chosen, TestOutcome base, Add& add) {
    std::map<int64_t, std::vector<std::pair<double, double>>> pairs;  // step -> (there, at)
    std::map<int64_t, std::vector<std::pair<const StudyRun*, int64_t>>> paired_runs;  // (run, at)
    std::set<std::string> claimed_steps;
    for (const StudyRun* r : runs) {
      if (!r->finished) continue;
      const std::optional<int64_t> at =
          t.at == "@R" ? ParseInt64(Param(*r, "R")) : ParseInt64(t.at);
      if (!at) continue;
      CART_ASSIGN_OR_RETURN(const std::vector<StudyPoint>* points,
                            SeriesOf(*r, MetricFor(t.metric, *r)));
      std::optional<double> at_value;
      for (const StudyPoint& p : *points) {
        if (p.step == *at) at_value = p.value;
      }
      if (!at_value) continue;
      claimed_steps.insert(std::to_string(*at));
      for (const StudyPoint& p : *points) {
        if (p.step == *at) continue;
        pairs[p.step].emplace_back(p.value, *at_value);
        paired_runs[p.step].emplace_back(r, *at);
      }
    }
    std::string at_text;
    for (const std::string& s : claimed_steps) at_text += (at_text.empty() ? "" : "/") + s;
    if (pairs.empty()) {
      base.label = t.label + Suffix(fixed, chosen);
      base.note = "no finished evaluation with this metric at the claimed step and another";
      add(base, Sides{}, false);
      return absl::OkStatus();
    }
    for (const auto& [step, values] : pairs) {
      TestOutcome o = base;
      o.label = fmt::format("{} at {} − at {}{}", t.label, step, at_text, Suffix(fixed, chosen));
      // The same items scored at both loop counts, when every run stored them: the test pairs
      // items (and seeds), not only runs.
      CART_ASSIGN_OR_RETURN(std::optional<stats::Estimate> by_items,
                            ItemTest(t, paired_runs[step], step, o));
      if (by_items) {
        o.over_items = true;
        FromEstimate(o, *by_items, t.log_scale);
        add(o, Directional(by_items->value, 0, by_items->p, TestSpec::Direction::kGreater), true);
        continue;
      }
      std::vector<double> there, at;
      for (const auto& [x, y] : values) there.push_back(x), at.push_back(y);
      if (t.log_scale) there = Logs(there), at = Logs(at);
      const stats::Estimate e = stats::PairedDifference(there, at);
      o.method = "paired t";
      FromEstimate(o, e, t.log_scale);
      if (std::isnan(e.p)) o.note = NoSpread(e);
      add(o, Directional(e.value, 0, e.p, TestSpec::Direction::kGreater), true);
    }
    return absl::OkStatus();
  }

  // A run's per-item outcomes (read once).
  absl::StatusOr<const std::vector<ItemOutcomes>*> ItemsOf(const StudyRun& r) {
    auto it = items_.find(r.id);
    if (it == items_.end()) {
      CART_ASSIGN_OR_RETURN(std::vector<ItemOutcomes> items, source_.EvalItems(r.id));
      it = items_.emplace(r.id, std::move(items)).first;
    }
    return &it->second;
  }

  // What one item contributes to a task metric at a loop count: LAMBADA's perplexity, its
  // negative log-likelihood (the log of the perplexity is their mean, so on the log scale the
  // item differences average to the test's difference); an accuracy, 1 or 0. Empty when the run
  // stored no items of that task there or the metric is not a task metric on its own scale.
  static std::vector<double> ItemValues(const std::vector<ItemOutcomes>& items,
                                        const std::string& metric, bool log_scale, int64_t loops,
                                        bool* binary) {
    const size_t slash = metric.find('/');
    if (slash == std::string::npos) return {};
    const std::string kind = metric.substr(0, slash), task = metric.substr(slash + 1);
    for (const ItemOutcomes& e : items) {
      if (e.task != task || e.loops != loops) continue;
      std::vector<double> out;
      if (kind == "task_ppl" && log_scale && e.logprob.size() == e.correct.size()) {
        for (double lp : e.logprob) out.push_back(-lp);
        *binary = false;
      } else if ((kind == "task_acc" || kind == "task_acc_norm") && !log_scale) {
        const std::string& bits = kind == "task_acc" ? e.correct : e.correct_norm;
        for (char c : bits) out.push_back(c == '1' ? 1.0 : 0.0);
        *binary = true;
      }
      return out;
    }
    return {};
  }

  // The step of the value an arm's run gave: the arm's step, else the last of its series.
  absl::StatusOr<std::optional<int64_t>> StepOf(const StudyRun& r, const std::string& metric,
                                                const std::string& step) {
    if (step == "@R") return ParseInt64(Param(r, "R"));
    if (!step.empty()) return ParseInt64(step);
    CART_ASSIGN_OR_RETURN(const std::vector<StudyPoint>* points, SeriesOf(r, metric));
    if (points->empty()) return std::nullopt;
    return points->back().step;
  }

  // Two arms over the items both scored (a task metric, runs paired by seed, one pair allowed):
  // each item's difference a − b, tested as ItemTest does; nullopt when some run lacks the items
  // or the seeds do not pair (the test then compares runs).
  absl::StatusOr<std::optional<stats::Estimate>> CompareItems(const TestSpec& t, const Sample& a,
                                                              const Sample& b, TestOutcome& o) {
    if (a.runs.empty() || a.runs.size() != b.runs.size()) return std::nullopt;
    std::map<std::string, const StudyRun*> b_by_seed;
    for (const StudyRun* r : b.runs) {
      if (!b_by_seed.emplace(Param(*r, "seed"), r).second) return std::nullopt;
    }
    std::vector<std::vector<double>> d;
    std::set<std::string> used;
    bool binary = false;
    for (const StudyRun* ra : a.runs) {
      const std::string seed = Param(*ra, "seed");
      auto it = b_by_seed.find(seed);
      if (seed.empty() || it == b_by_seed.end() || !used.insert(seed).second) return std::nullopt;
      const StudyRun* rb = it->second;
      const std::string ma = MetricFor(t.metric, *ra), mb = MetricFor(t.metric, *rb);
      CART_ASSIGN_OR_RETURN(std::optional<int64_t> sa, StepOf(*ra, ma, t.a.step));
      CART_ASSIGN_OR_RETURN(std::optional<int64_t> sb, StepOf(*rb, mb, t.b.step));
      if (!sa || !sb) return std::nullopt;
      CART_ASSIGN_OR_RETURN(const std::vector<ItemOutcomes>* ia, ItemsOf(*ra));
      CART_ASSIGN_OR_RETURN(const std::vector<ItemOutcomes>* ib, ItemsOf(*rb));
      if (!AddDifferences(ItemValues(*ia, ma, t.log_scale, *sa, &binary),
                          ItemValues(*ib, mb, t.log_scale, *sb, &binary), d)) {
        return std::nullopt;
      }
    }
    return ItemEstimate(d, binary, o);
  }

  // Appends the item differences x − y as a row of d; false when there are none, or the two (or
  // the rows before) hold different numbers of items.
  static bool AddDifferences(const std::vector<double>& x, const std::vector<double>& y,
                             std::vector<std::vector<double>>& d) {
    if (x.empty() || x.size() != y.size() || (!d.empty() && d[0].size() != x.size())) {
      return false;
    }
    std::vector<double> row(x.size());
    for (size_t i = 0; i < x.size(); ++i) row[i] = x[i] - y[i];
    d.push_back(std::move(row));
    return true;
  }

  // McNemar's test for one pair of right-or-wrong outcomes, else the paired bootstrap over
  // items and seeds; the method named on `o`.
  static stats::Estimate ItemEstimate(const std::vector<std::vector<double>>& d, bool binary,
                                      TestOutcome& o) {
    const int64_t items = static_cast<int64_t>(d[0].size());
    if (binary && d.size() == 1) {
      // Items right only under the first, and only under the second.
      const int64_t b = std::count_if(d[0].begin(), d[0].end(), [](double x) { return x > 0; });
      const int64_t c = std::count_if(d[0].begin(), d[0].end(), [](double x) { return x < 0; });
      o.method = fmt::format("McNemar {}, {} items", b + c <= 50 ? "exact" : "corrected", items);
      return stats::McNemarDifference(b, c, items);
    }
    // Seeded by the test's label: the same report twice gives the same numbers.
    const uint64_t seed = std::hash<std::string>{}(o.label);
    o.method = fmt::format("paired bootstrap, {} items × {} seed{}", items, d.size(),
                           d.size() == 1 ? "" : "s");
    return stats::PairedBootstrap(d, 2000, seed);
  }

  // The test at `step` against each run's claimed step over the items every run scored at both:
  // McNemar's test for one run's right-or-wrong outcomes, else the paired bootstrap over items
  // and seeds. nullopt when some run lacks them (the test then pairs runs).
  absl::StatusOr<std::optional<stats::Estimate>> ItemTest(
      const TestSpec& t, const std::vector<std::pair<const StudyRun*, int64_t>>& runs, int64_t step,
      TestOutcome& o) {
    std::vector<std::vector<double>> d;
    bool binary = false;
    for (const auto& [r, at] : runs) {
      CART_ASSIGN_OR_RETURN(const std::vector<ItemOutcomes>* items, ItemsOf(*r));
      const std::string metric = MetricFor(t.metric, *r);
      if (!AddDifferences(ItemValues(*items, metric, t.log_scale, step, &binary),
                          ItemValues(*items, metric, t.log_scale, at, &binary), d)) {
        return std::nullopt;
      }
    }
    if (d.empty()) return std::nullopt;
    stats::Estimate e = ItemEstimate(d, binary, o);
    o.se_raw = e.se;
    return e;
  }

  // A side's config for the planner: its first run's keys, less the seed.
  static std::map<std::string, std::string> ArmConfig(const std::vector<const StudyRun*>& runs) {
    if (runs.empty()) return {};
    std::map<std::string, std::string> config = runs.front()->params;
    config.erase("seed");
    return config;
  }

  static int64_t ArmRun(const std::vector<const StudyRun*>& runs) {
    return runs.empty() ? 0 : runs.front()->id;
  }

  static std::string NoSpread(const stats::Estimate& e) {
    if (std::isnan(e.value)) return "a diverged run (NaN) among them";
    if (e.n2 > 0) {
      return fmt::format("{} and {} runs: each side needs 2 for its spread", e.n, e.n2);
    }
    return fmt::format("{} run{}: no estimate of seed noise", e.n, e.n == 1 ? "" : "s");
  }

  // The smallest |ρ| a rank correlation over n runs detects at 80 % power and α = 0.05, by
  // Fisher's z with the variance 1.06 / (n − 3) of Fieller, Hartley and Pearson (1957).
  static double DetectableCorrelation(int64_t n) {
    if (n <= 3) return kNaN;
    constexpr double kZAlpha = 1.959963984540054, kZPower = 0.8416212335729143;
    return std::tanh((kZAlpha + kZPower) * std::sqrt(1.06 / static_cast<double>(n - 3)));
  }

  StudySource& source_;
  const ClaimInputs& inputs_;
  std::map<std::pair<int64_t, std::string>, std::vector<StudyPoint>> series_;
  std::map<int64_t, std::vector<ItemOutcomes>> items_;  // by run
  std::map<int64_t, const StudyRun*> selected_;         // the claim's sides' runs so far, by id
};

}  // namespace

absl::StatusOr<std::vector<ClaimOutcome>> DecideClaims(StudySource& source,
                                                       const std::vector<ClaimSpec>& claims,
                                                       const ClaimInputs& inputs) {
  Decider decider(source, inputs);
  std::vector<ClaimOutcome> out;
  for (const ClaimSpec& c : claims) {
    CART_ASSIGN_OR_RETURN(ClaimOutcome o, decider.Decide(c));
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace cart::report
