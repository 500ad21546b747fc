#include "common/student_t.h"

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <limits>

#include "common/math_policy.h"

namespace cart::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using StudentT = boost::math::students_t_distribution<double, MathPolicy>;

}  // namespace

double StudentTTwoSided(double t, double df) {
  if (std::isnan(t) || std::isnan(df) || df <= 0) return kNaN;
  if (std::isinf(t)) return 0;
  // The upper tail directly, not 1 - cdf: far in the tail the difference would cancel to 0.
  return std::min(1.0, 2 * boost::math::cdf(boost::math::complement(StudentT(df), std::abs(t))));
}

double StudentTCdf(double t, double df) {
  if (std::isnan(t) || std::isnan(df) || df <= 0) return kNaN;
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  return boost::math::cdf(StudentT(df), t);
}

double StudentTQuantile(double p, double df) {
  if (std::isnan(p) || std::isnan(df) || df <= 0 || p <= 0 || p >= 1) return kNaN;
  return boost::math::quantile(StudentT(df), p);
}

SampleMean MeanOf(const std::vector<double>& x, double level) {
  SampleMean m{static_cast<int64_t>(x.size()), kNaN, kNaN, kNaN, kNaN, kNaN};
  if (x.empty()) return m;
  double sum = 0;
  for (double v : x) sum += v;
  m.mean = sum / static_cast<double>(m.n);
  if (std::isnan(m.mean) || m.n < 2) return m;
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  const double n = static_cast<double>(m.n);
  m.std = std::sqrt(ss / (n - 1));
  m.se = m.std / std::sqrt(n);
  const double half = StudentTQuantile(0.5 + level / 2, n - 1) * m.se;
  m.low = m.mean - half;
  m.high = m.mean + half;
  return m;
}

}  // namespace cart::stats
