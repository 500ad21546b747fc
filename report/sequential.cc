#include "report/sequential.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>

#include "report/stats.h"

namespace cart::report::stats {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A boundary past this is a look that spends nothing.
constexpr double kNoBoundary = 40;
// Points of the grid over the continuation region at each look (odd: Simpson's rule).
constexpr int kGrid = 801;

double Phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
double PhiUpper(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }
double Density(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }
double NormalQuantile(double p) {
  // Φ⁻¹ by bisection on erfc: only called with a handful of levels.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (Phi(mid) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

bool ValidFractions(const std::vector<double>& t) {
  double before = 0;
  for (double x : t) {
    if (!(x > before && x <= 1)) return false;
    before = x;
  }
  return !t.empty();
}

// The sub-density of the score S at one look over its continuation region (−b, b), on a grid:
// the chance of having crossed no boundary so far and being at s.
struct Stage {
  double b = 0;              // half-width of the region, on the score scale
  std::vector<double> s, f;  // grid points and the sub-density there
  std::vector<double> w;     // Simpson weights
};

// The grid over (−b, b) with Simpson weights, the sub-density `density` evaluated on it.
template <typename Density>
Stage OnGrid(double b, const Density& density) {
  Stage st;
  st.b = b;
  const double h = 2 * b / (kGrid - 1);
  for (int i = 0; i < kGrid; ++i) {
    const double s = -b + i * h;
    st.s.push_back(s);
    st.f.push_back(density(s));
    st.w.push_back(h / 3 * (i == 0 || i == kGrid - 1 ? 1 : i % 2 ? 4 : 2));
  }
  return st;
}

// The first look: S_1 ~ N(drift t1, t1), kept on (−b, b).
Stage FirstStage(double t1, double b, double drift) {
  const double sd = std::sqrt(t1);
  return OnGrid(b, [&](double s) { return Density((s - drift * t1) / sd) / sd; });
}

// The chance of crossing (−b, b) at the next look, the increment N(drift Δ, Δ) added to the
// score kept at `before`.
double Crossing(const Stage& before, double b, double delta, double drift) {
  const double sd = std::sqrt(delta);
  double sum = 0;
  for (int i = 0; i < kGrid; ++i) {
    const double m = before.s[i] + drift * delta;
    sum += before.w[i] * before.f[i] * (Phi((-b - m) / sd) + PhiUpper((b - m) / sd));
  }
  return sum;
}

// The sub-density at the next look over (−b, b): the kept density convolved with the increment.
Stage NextStage(const Stage& before, double b, double delta, double drift) {
  const double sd = std::sqrt(delta);
  return OnGrid(b, [&](double s) {
    double sum = 0;
    for (int i = 0; i < kGrid; ++i) {
      sum += before.w[i] * before.f[i] * Density((s - before.s[i] - drift * delta) / sd) / sd;
    }
    return sum;
  });
}

}  // namespace

double SpentAlpha(Spending spending, double alpha, double t) {
  if (!(t > 0)) return 0;
  t = std::min(t, 1.0);
  switch (spending) {
    case Spending::kOBrienFleming:
      return 2 * PhiUpper(NormalQuantile(1 - alpha / 2) / std::sqrt(t));
    case Spending::kPocock:
      return alpha * std::log(1 + (std::exp(1.0) - 1) * t);
  }
  return 0;
}

double NominalLevel(double boundary) { return std::isinf(boundary) ? 0 : 2 * PhiUpper(boundary); }

std::vector<double> SequentialBoundaries(const std::vector<double>& fractions, double alpha,
                                         Spending spending) {
  if (!ValidFractions(fractions) || !(alpha > 0 && alpha < 1)) return {};
  std::vector<double> c;
  Stage stage;
  double spent = 0;
  for (size_t k = 0; k < fractions.size(); ++k) {
    const double t = fractions[k];
    const double target = SpentAlpha(spending, alpha, t) - spent;
    const double delta = k == 0 ? t : t - fractions[k - 1];
    // The chance of crossing at this look with boundary z (on Z; the score's is z √t).
    auto crossing = [&](double z) {
      const double b = z * std::sqrt(t);
      return k == 0 ? 2 * PhiUpper(z) : Crossing(stage, b, delta, 0);
    };
    double z = kInf;
    if (target > 1e-15) {
      double lo = 0, hi = kNoBoundary;  // crossing falls as z rises
      for (int i = 0; i < 100; ++i) {
        const double mid = (lo + hi) / 2;
        (crossing(mid) > target ? lo : hi) = mid;
      }
      z = (lo + hi) / 2;
    }
    c.push_back(z);
    spent += std::isinf(z) ? 0 : crossing(z);
    const double b = (std::isinf(z) ? kNoBoundary : z) * std::sqrt(t);
    stage = k == 0 ? FirstStage(t, b, 0) : NextStage(stage, b, delta, 0);
  }
  return c;
}

std::vector<double> CrossingProbabilities(const std::vector<double>& fractions,
                                          const std::vector<double>& boundaries, double drift) {
  if (!ValidFractions(fractions) || boundaries.size() != fractions.size()) return {};
  std::vector<double> out;
  Stage stage;
  for (size_t k = 0; k < fractions.size(); ++k) {
    const double t = fractions[k];
    const double z = std::isinf(boundaries[k]) ? kNoBoundary : boundaries[k];
    const double b = z * std::sqrt(t);
    if (k == 0) {
      const double sd = std::sqrt(t);
      out.push_back(PhiUpper((b - drift * t) / sd) + Phi((-b - drift * t) / sd));
      stage = FirstStage(t, b, drift);
    } else {
      const double delta = t - fractions[k - 1];
      out.push_back(Crossing(stage, b, delta, drift));
      stage = NextStage(stage, b, delta, drift);
    }
  }
  return out;
}

double InflationFactor(const std::vector<double>& fractions, double alpha, Spending spending,
                       double power) {
  if (!(power > alpha && power < 1)) return std::numeric_limits<double>::quiet_NaN();
  // The drift at which the design's crossings sum to `power`: they rise with it.
  auto drift_for = [&](const std::vector<double>& t) {
    const std::vector<double> c = SequentialBoundaries(t, alpha, spending);
    if (c.empty()) return std::numeric_limits<double>::quiet_NaN();
    auto power_at = [&](double drift) {
      const std::vector<double> p = CrossingProbabilities(t, c, drift);
      return std::accumulate(p.begin(), p.end(), 0.0);
    };
    double lo = 0, hi = 20;
    for (int i = 0; i < 80; ++i) {
      const double mid = (lo + hi) / 2;
      (power_at(mid) < power ? lo : hi) = mid;
    }
    return (lo + hi) / 2;
  };
  const double fixed = drift_for({1.0});
  const double sequential = drift_for(fractions);
  return sequential * sequential / (fixed * fixed);
}

SequentialHolm::SequentialHolm(std::vector<double> fractions, double alpha, Spending spending,
                               int claims)
    : claims_(claims) {
  for (int j = 1; j <= claims; ++j) {
    boundaries_.push_back(SequentialBoundaries(fractions, alpha / j, spending));
    if (boundaries_.back().empty()) {
      boundaries_.clear();
      return;
    }
  }
}

SequentialHolm SequentialHolm::Unspent(int looks, double alpha, int claims) {
  SequentialHolm holm;
  holm.claims_ = claims;
  for (int j = 1; j <= claims; ++j) {
    const std::vector<double> fixed = SequentialBoundaries({1.0}, alpha / j, Spending::kPocock);
    holm.boundaries_.emplace_back(looks, fixed.empty() ? kInf : fixed[0]);
  }
  return holm;
}

double SequentialHolm::Level(int look, int j) const {
  if (j < 1 || j > static_cast<int>(boundaries_.size())) return 0;
  const std::vector<double>& c = boundaries_[j - 1];
  return look >= 0 && look < static_cast<int>(c.size()) ? NominalLevel(c[look]) : 0;
}

std::vector<int> SequentialHolm::Decide(int look, std::vector<std::pair<int, double>> undecided,
                                        int decided_before) const {
  std::sort(undecided.begin(), undecided.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<int> now;
  int decided = decided_before;
  for (const auto& [claim, p] : undecided) {
    if (!(p < Level(look, claims_ - decided))) break;
    now.push_back(claim);
    ++decided;
  }
  return now;
}

namespace {

// One-sample t test of the first n of `x` against 0: the two-sided p and the mean's sign.
std::pair<double, double> TTest(const std::vector<double>& x, int n) {
  const Estimate e = Mean(std::vector<double>(x.begin(), x.begin() + n));
  return {e.p, e.value};
}

}  // namespace

FamilyOutcome SimulateFamily(const FamilySimulation& spec) {
  FamilyOutcome out;
  const int m = static_cast<int>(spec.effects.size());
  const int most = std::max(spec.fixed_seeds, spec.look_seeds.empty() ? 0 : spec.look_seeds.back());
  if (m == 0 || spec.studies <= 0 || most < 2) return out;
  std::vector<double> fractions;
  for (int n : spec.look_seeds)
    fractions.push_back(static_cast<double>(n) / spec.look_seeds.back());
  const SequentialHolm holm =
      spec.unspent ? SequentialHolm::Unspent(static_cast<int>(fractions.size()), spec.alpha, m)
                   : SequentialHolm(fractions, spec.alpha, spec.spending, m);
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<double> normal(0, 1);
  int alternatives = 0;
  for (double e : spec.effects) alternatives += e != 0;
  double fixed_errors = 0, sequential_errors = 0, fixed_right = 0, sequential_right = 0;
  double fixed_used = 0, sequential_used = 0;
  std::vector<std::vector<double>> seeds(m, std::vector<double>(most));
  for (int study = 0; study < spec.studies; ++study) {
    for (int c = 0; c < m; ++c) {
      for (double& x : seeds[c]) x = spec.effects[c] + normal(rng);
    }
    // (a) Fixed: every claim at fixed_seeds, Holm at α.
    std::vector<double> p(m), sign(m);
    for (int c = 0; c < m; ++c) std::tie(p[c], sign[c]) = TTest(seeds[c], spec.fixed_seeds);
    const std::vector<double> adjusted = Holm(p);
    bool false_decision = false;
    for (int c = 0; c < m; ++c) {
      if (!(adjusted[c] < spec.alpha)) continue;
      if (spec.effects[c] == 0) false_decision = true;
      if (spec.effects[c] != 0 && (sign[c] > 0) == (spec.effects[c] > 0)) ++fixed_right;
    }
    fixed_errors += false_decision;
    fixed_used += static_cast<double>(m) * spec.fixed_seeds;
    // (b) Sequential: looks until every claim is decided or the last look.
    std::vector<bool> decided(m, false);
    int decided_count = 0;
    false_decision = false;
    for (size_t look = 0; look < spec.look_seeds.size(); ++look) {
      const int n = spec.look_seeds[look];
      std::vector<std::pair<int, double>> open;
      std::vector<double> signs(m);
      for (int c = 0; c < m; ++c) {
        if (decided[c]) continue;
        double pc = 0;
        std::tie(pc, signs[c]) = TTest(seeds[c], n);
        open.emplace_back(c, pc);
        sequential_used += n - (look == 0 ? 0 : spec.look_seeds[look - 1]);
      }
      for (int c : holm.Decide(static_cast<int>(look), open, decided_count)) {
        decided[c] = true;
        ++decided_count;
        if (spec.effects[c] == 0) false_decision = true;
        if (spec.effects[c] != 0 && (signs[c] > 0) == (spec.effects[c] > 0)) ++sequential_right;
      }
    }
    sequential_errors += false_decision;
  }
  const double studies = spec.studies;
  out.fixed_familywise_error = fixed_errors / studies;
  out.sequential_familywise_error = sequential_errors / studies;
  out.fixed_power = alternatives ? fixed_right / (studies * alternatives) : 0;
  out.sequential_power = alternatives ? sequential_right / (studies * alternatives) : 0;
  out.fixed_seeds = fixed_used / studies;
  out.sequential_seeds = sequential_used / studies;
  return out;
}

}  // namespace cart::report::stats
