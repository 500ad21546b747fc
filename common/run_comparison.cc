#include "common/run_comparison.h"

#include <cmath>

#include "common/strings.h"

namespace cart {

std::vector<Difference> Differences(const std::map<std::string, std::string>& a,
                                    const std::map<std::string, std::string>& b) {
  std::map<std::string, std::pair<std::string, std::string>> all;
  for (const auto& [k, v] : a) all[k].first = v;
  for (const auto& [k, v] : b) all[k].second = v;
  std::vector<Difference> out;
  for (const auto& [k, v] : all) {
    if (v.first != v.second) {
      out.push_back(
          Difference{k, v.first.empty() ? "-" : v.first, v.second.empty() ? "-" : v.second});
    }
  }
  return out;
}

std::map<std::string, std::string> ConfigKeys(std::string_view yaml) {
  std::map<std::string, std::string> keys;
  for (const std::string& line : Split(yaml, '\n')) {
    if (line.empty() || line[0] == ' ' || line[0] == '#') continue;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    keys[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return keys;
}

bool ShownMetric(std::string_view name) {
  return name.rfind("sys/", 0) != 0 && name.rfind("h_norm/", 0) != 0 &&
         name.rfind("rel_update/", 0) != 0;
}

SeriesComparison CompareSeries(const std::map<int64_t, double>& a,
                               const std::map<int64_t, double>& b) {
  SeriesComparison out;
  for (const auto& [step, value] : a) {
    auto it = b.find(step);
    if (it == b.end()) continue;
    ++out.common;
    if (!out.parted && !(value == it->second || (std::isnan(value) && std::isnan(it->second)))) {
      out.parted = step;
      out.a_at_parting = value;
      out.b_at_parting = it->second;
    }
    if (std::abs(value - it->second) > out.largest) {
      out.largest = std::abs(value - it->second);
      out.largest_at = step;
    }
  }
  return out;
}

}  // namespace cart
