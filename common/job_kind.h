#pragma once

// What a run does, in one vocabulary for sweep files, the store, the scheduler and the wire.

#include <optional>
#include <string_view>

namespace cart {

enum class JobKind {
  kTrain,  // trains a model (from scratch, or from a parent checkpoint for derived train jobs)
  kEval,   // evaluates a parent's checkpoint at each of its loop counts (a derived job)
};

std::string_view JobKindName(JobKind kind);  // "train", "eval" (sweep files, the database)
// "train" or "eval"; nullopt otherwise.
std::optional<JobKind> ParseJobKind(std::string_view name);

}  // namespace cart
