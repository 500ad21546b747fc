#pragma once

// The dashboard's study view (GET /api/v1/study; docs/dashboard.md "The study and its plan"): the
// paper's claims decided from cartd's database as `cart report` decides them, each sequential
// claim's look, the seeds `cart plan` would add to decide those that cannot tell, and the plans
// already applied. Reads the store through report/'s StudySource; writes nothing.

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "store/run_store.h"
#include "store/spending.h"

namespace cart::server {

struct StudyQuery {
  double power = 0.8;
  double alpha = 0.05;
  // Part of the study -> the sweep that holds it (stage1, stage2, baselines, ablations,
  // faithfulness, leak, variable_r); a part not given keeps its default sweep name.
  std::map<std::string, std::string> sweeps;
  store::EnergyPrices prices;  // cartd's: what the claims' and parts' energy is priced at
};

// What attempts used (store/spending.h) as every dashboard view shows it: kWh of the measured
// ones (null when none was), cost and CO2 where cartd has a price and a carbon intensity,
// device-hours, and the same in one line.
nlohmann::json SpendingJson(const store::Spending& s, const store::EnergyPrices& prices);

// InvalidArgument naming the parameter for a power or alpha outside (0, 1) or an unknown part;
// the store's errors.
absl::StatusOr<nlohmann::json> StudyJson(store::RunStore& store, const StudyQuery& query);

}  // namespace cart::server
