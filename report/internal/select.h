#pragma once

// Picking runs by config values: what the report's tables and the claims both narrow runs by.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "report/report.h"

namespace cart::report::internal {

using Runs = std::vector<const StudyRun*>;

// A run's config value of `key`; empty when it has none.
std::string Param(const StudyRun& r, const std::string& key);
// The values of `key` among the runs, each once: in numeric order when all are numbers, else in
// text order.
std::vector<std::string> Distinct(const Runs& runs, const std::string& key);
// The runs whose config has every (key, value) of `match`.
Runs Where(const Runs& runs, const std::map<std::string, std::string>& match);
// Whether two runs have the same value of every config key either has, except `but`'s.
bool SameConfigBut(const StudyRun& a, const StudyRun& b, const std::set<std::string>& but);

}  // namespace cart::report::internal
