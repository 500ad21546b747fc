#pragma once

// How two runs differ (docs/architecture.md "Comparing runs"), on plain maps so that
// `cart runs diff`, `cart reproduce` and the dashboard's compare view (GET /api/v1/compare) say
// the same thing: the keys whose values differ, and two metric series compared step by step.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cart {

// A key whose value differs between two runs; "-" stands for a value one side lacks.
struct Difference {
  std::string key;
  std::string a;
  std::string b;
};

// The keys of either map whose values differ, by key.
std::vector<Difference> Differences(const std::map<std::string, std::string>& a,
                                    const std::map<std::string, std::string>& b);

// A resolved run config's top-level "key: value" lines (config::ToYaml's form).
std::map<std::string, std::string> ConfigKeys(std::string_view yaml);

// Whether a metric is one a comparison lists (not the per-device sys/ readings or the per-loop
// h_norm/ and rel_update/ series).
bool ShownMetric(std::string_view name);

// Two series compared at the steps both have: how many, the first at which they differ bit for
// bit (a NaN matching a NaN), the values there, and the largest deviation and where.
struct SeriesComparison {
  int64_t common = 0;
  std::optional<int64_t> parted;
  double a_at_parting = 0;
  double b_at_parting = 0;
  double largest = 0;
  int64_t largest_at = 0;
};
SeriesComparison CompareSeries(const std::map<int64_t, double>& a,
                               const std::map<int64_t, double>& b);

}  // namespace cart
