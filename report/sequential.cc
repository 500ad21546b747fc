#include "report/sequential.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace cart::report::stats
