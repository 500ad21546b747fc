#include "store/types.h"

#include <array>
#include <utility>

namespace cart::store {
namespace {

constexpr std::array<std::pair<RunState, std::string_view>, 7> kStateNames = {{
    {RunState::kQueued, "QUEUED"},
    {RunState::kBlocked, "BLOCKED"},
    {RunState::kLeased, "LEASED"},
    {RunState::kRunning, "RUNNING"},
    {RunState::kSucceeded, "SUCCEEDED"},
    {RunState::kFailed, "FAILED"},
    {RunState::kCancelled, "CANCELLED"},
}};

constexpr std::array<std::pair<AttemptOutcome, std::string_view>, 6> kOutcomeNames = {{
    {AttemptOutcome::kSucceeded, "SUCCEEDED"},
    {AttemptOutcome::kFailed, "FAILED"},
    {AttemptOutcome::kCancelled, "CANCELLED"},
    {AttemptOutcome::kDrained, "DRAINED"},
    {AttemptOutcome::kOutOfMemory, "OUT_OF_MEMORY"},
    {AttemptOutcome::kLost, "LOST"},
}};

constexpr std::array<std::pair<EventCause, std::string_view>, 4> kCauseNames = {{
    {EventCause::kNone, ""},
    {EventCause::kLeaseExpired, "lease_expired"},
    {EventCause::kPreempted, "preempted"},
    {EventCause::kDiverged, "diverged"},
}};

template <typename Enum, size_t N>
std::string_view NameOf(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum e) {
  for (const auto& [value, name] : names) {
    if (value == e) return name;
  }
  return "UNKNOWN";
}

template <typename Enum, size_t N>
std::optional<Enum> Parse(const std::array<std::pair<Enum, std::string_view>, N>& names,
                          std::string_view text) {
  for (const auto& [value, name] : names) {
    if (name == text) return value;
  }
  return std::nullopt;
}

}  // namespace

std::string_view RunStateName(RunState state) { return NameOf(kStateNames, state); }

std::optional<RunState> ParseRunState(std::string_view name) { return Parse(kStateNames, name); }

std::string_view AttemptOutcomeName(AttemptOutcome outcome) {
  return NameOf(kOutcomeNames, outcome);
}

std::optional<AttemptOutcome> ParseAttemptOutcome(std::string_view name) {
  return Parse(kOutcomeNames, name);
}

std::string_view EventCauseName(EventCause cause) { return NameOf(kCauseNames, cause); }

std::optional<EventCause> ParseEventCause(std::string_view name) {
  return Parse(kCauseNames, name);
}

bool IsTerminal(RunState state) {
  return state == RunState::kSucceeded || state == RunState::kFailed ||
         state == RunState::kCancelled;
}

bool IsLegalTransition(RunState from, RunState to) {
  using S = RunState;
  switch (from) {
    case S::kQueued:
      return to == S::kLeased || to == S::kCancelled;
    case S::kBlocked:
      return to == S::kQueued || to == S::kCancelled;
    case S::kLeased:
      return to == S::kRunning || to == S::kQueued || to == S::kFailed || to == S::kCancelled;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kFailed || to == S::kCancelled || to == S::kQueued;
    case S::kSucceeded:
      return to == S::kQueued;
    case S::kFailed:
    case S::kCancelled:
      return to == S::kQueued || to == S::kBlocked;
  }
  return false;
}

std::string_view AnnotationKindName(AnnotationEvent::Kind kind) {
  switch (kind) {
    case AnnotationEvent::Kind::kTagAdded:
      return "tag added";
    case AnnotationEvent::Kind::kTagRemoved:
      return "tag removed";
    case AnnotationEvent::Kind::kNote:
      return "note";
  }
  return "note";
}

std::string_view OwnerName(std::string_view created_by) {
  const size_t colon = created_by.find(':');
  return colon == std::string_view::npos ? created_by : created_by.substr(colon + 1);
}

double BudgetUse::UserSpent(const std::string& user) const {
  double spent = 0;
  for (const auto& [id, sweep] : sweeps) {
    if (OwnerName(sweep.owner) == user) spent += sweep.spent;
  }
  for (const auto& [owner, hours] : deleted_spent) {
    if (OwnerName(owner) == user) spent += hours;
  }
  return spent;
}

}  // namespace cart::store
