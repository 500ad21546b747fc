#include "common/job_kind.h"

namespace cart {

std::string_view JobKindName(JobKind kind) { return kind == JobKind::kEval ? "eval" : "train"; }

std::optional<JobKind> ParseJobKind(std::string_view name) {
  if (name == "train") return JobKind::kTrain;
  if (name == "eval") return JobKind::kEval;
  return std::nullopt;
}

}  // namespace cart
