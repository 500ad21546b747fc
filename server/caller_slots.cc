#include "server/caller_slots.h"

#include "common/strings.h"

namespace cart::server {

absl::StatusOr<std::shared_ptr<void>> CallerSlots::Take(const std::string& who) {
  absl::MutexLock lock(&mu_);
  int& mine = held_[who];
  if (mine >= per_caller_ || all_ >= total_) {
    const int held = mine;
    if (held == 0) held_.erase(who);
    return absl::ResourceExhaustedError(StrCat(who, " has ", held, " ", what_,
                                               " in progress (limit ", per_caller_, " per caller, ",
                                               all_, " of ", total_, " for everyone): ", hint_));
  }
  ++mine;
  ++all_;
  return std::shared_ptr<void>(nullptr, [this, who](void*) {
    absl::MutexLock release(&mu_);
    if (--held_[who] == 0) held_.erase(who);
    --all_;
  });
}

}  // namespace cart::server
