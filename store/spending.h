#pragma once

// What runs and sweeps used, priced (docs/operations.md "Energy"): energy measured by the
// workers' device counters, device-hours from the attempts' times, and cartd's price and carbon
// intensity per kWh (config: energy_price_per_kwh, energy_currency, co2_grams_per_kwh). Pure
// functions over the store's records; the gRPC views, the dashboard, /metrics and `cart report`
// show what they give.

#include <cstdint>
#include <string>
#include <vector>

#include "store/types.h"

namespace cart::store {

struct EnergyPrices {
  double per_kwh = 0;  // 0: no price set
  std::string currency = "EUR";
  double co2_grams_per_kwh = 0;  // 0: no carbon intensity set
};

// One attempt list's spending (a run's): its attempts, measured energy, device-hours (each from
// its start, or its lease when it never started, to its end or `now_us`).
Spending SpendingOf(const std::vector<AttemptRecord>& attempts, int64_t now_us);

// Adds `more` into `into`: attempts, energy, device-hours; each counter's name once.
void Add(Spending& into, const Spending& more);

// The kWh of a spending, and its cost and CO2 at `prices` (0 where the price is not set).
struct SpendingFigures {
  double kwh = 0;
  double cost = 0;
  double co2_grams = 0;
};
SpendingFigures FiguresOf(const Spending& spending, const EnergyPrices& prices);

// Energy for people: "1.284 kWh", "3.42 Wh", "812 J".
std::string EnergyText(double joules);

// One line for people: "0.412 kWh (2 of 3 attempts measured, nvml) · 0.12 EUR · 161 g CO2 ·
// 1.25 device-hours"; "energy not measured · 1.25 device-hours" when no attempt was.
std::string SpendingLine(const Spending& spending, const EnergyPrices& prices);

}  // namespace cart::store
