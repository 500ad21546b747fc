#pragma once

// A seed plan as JSON, the one shape `cart plan --json` prints, `cart plan --apply` records with
// the plan and the dashboard's study view serves (docs/study.md "Planning seeds"). Header-only:
// report/ itself does not link nlohmann_json; its users do.

#include <nlohmann/json.hpp>
#include <vector>

#include "report/plan.h"

namespace cart::report {

inline nlohmann::json PlansJson(const std::vector<ClaimPlan>& plans) {
  nlohmann::json out = nlohmann::json::array();
  for (const ClaimPlan& p : plans) {
    nlohmann::json tests = nlohmann::json::array();
    for (const TestPlan& t : p.tests) {
      tests.push_back({{"test", t.label},
                       {"design", t.design},
                       {"seeds_now", t.seeds_now},
                       {"seeds_needed", t.seeds_needed},
                       {"fixed_seeds", t.fixed_seeds},
                       {"looks", t.looks},
                       {"runs", t.runs},
                       {"rtx3090_hours", t.hours},
                       {"effect", t.effect},
                       {"sd", t.sd},
                       {"prior", t.prior},
                       {"note", t.note}});
    }
    out.push_back({{"claim", p.id},
                   {"planned", p.planned},
                   {"runs", p.runs},
                   {"rtx3090_hours", p.hours},
                   {"expected_finish_us", p.expected_finish_us},
                   {"note", p.note},
                   {"tests", tests}});
  }
  return out;
}

}  // namespace cart::report
