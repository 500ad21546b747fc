#include "store/spending.h"

#include <algorithm>
#include <cmath>

#include "common/strings.h"

namespace cart::store {

Spending SpendingOf(const std::vector<AttemptRecord>& attempts, int64_t now_us) {
  Spending s;
  for (const AttemptRecord& a : attempts) {
    ++s.attempts;
    const int64_t from = a.started_us.value_or(a.leased_us);
    s.device_hours +=
        static_cast<double>(std::max<int64_t>(0, a.ended_us.value_or(now_us) - from)) / 3.6e9;
    if (!a.energy_j) continue;
    ++s.measured_attempts;
    s.energy_j += *a.energy_j;
    if (!a.energy_source.empty() &&
        std::find(s.sources.begin(), s.sources.end(), a.energy_source) == s.sources.end()) {
      s.sources.push_back(a.energy_source);
    }
  }
  std::sort(s.sources.begin(), s.sources.end());
  return s;
}

void Add(Spending& into, const Spending& more) {
  into.attempts += more.attempts;
  into.measured_attempts += more.measured_attempts;
  into.energy_j += more.energy_j;
  into.device_hours += more.device_hours;
  for (const std::string& source : more.sources) {
    if (std::find(into.sources.begin(), into.sources.end(), source) == into.sources.end()) {
      into.sources.push_back(source);
    }
  }
  std::sort(into.sources.begin(), into.sources.end());
}

SpendingFigures FiguresOf(const Spending& spending, const EnergyPrices& prices) {
  SpendingFigures f;
  f.kwh = spending.energy_j / 3.6e6;
  f.cost = f.kwh * prices.per_kwh;
  f.co2_grams = f.kwh * prices.co2_grams_per_kwh;
  return f;
}

std::string EnergyText(double joules) {
  if (joules >= 3.6e6) return StrCat(Fixed(joules / 3.6e6, 3), " kWh");
  if (joules >= 3.6e3) return StrCat(Fixed(joules / 3.6e3, 2), " Wh");
  return StrCat(Fixed(joules, 0), " J");
}

std::string SpendingLine(const Spending& spending, const EnergyPrices& prices) {
  // Small figures keep two significant digits rather than rounding to zero.
  auto figure = [](double v, int decimals) {
    while (decimals < 6 && v > 0 && v < std::pow(10.0, 1 - decimals)) ++decimals;
    return Fixed(v, decimals);
  };
  const std::string hours = StrCat(figure(spending.device_hours, 2), " device-hours");
  if (spending.measured_attempts == 0) return StrCat("energy not measured · ", hours);
  const SpendingFigures f = FiguresOf(spending, prices);
  std::string line =
      StrCat(EnergyText(spending.energy_j), " (", spending.measured_attempts, " of ",
             spending.attempts, " attempts measured, ", StrJoin(spending.sources, ", "), ")");
  if (prices.per_kwh > 0) line += StrCat(" · ", figure(f.cost, 2), " ", prices.currency);
  if (prices.co2_grams_per_kwh > 0) line += StrCat(" · ", figure(f.co2_grams, 0), " g CO2");
  return StrCat(line, " · ", hours);
}

}  // namespace cart::store
