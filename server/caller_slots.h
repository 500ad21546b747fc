#pragma once

// Bounds how many calls of one kind a caller, and all callers together, may have in progress:
// follow streams (each holds a server thread for as long as it follows) and large reads (each
// holds up to one answer's worth of runs in memory). Without a bound, a few thousand followers
// from one user left RegisterWorker without a thread, and eight parallel readers of every run
// took cartd to gigabytes. Shared by the gRPC services and the dashboard. Thread-safe.

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace cart::server {

class CallerSlots {
 public:
  // `what` names the calls in messages ("follow streams"); `hint` says what to do when refused.
  CallerSlots(int per_caller, int total, std::string what, std::string hint)
      : per_caller_(per_caller), total_(total), what_(std::move(what)), hint_(std::move(hint)) {}
  // A slot for `who`, given back when the returned handle is destroyed. ResourceExhausted naming
  // the limit when `who` (or everyone together) holds the most allowed.
  absl::StatusOr<std::shared_ptr<void>> Take(const std::string& who);

  int per_caller() const { return per_caller_; }
  int total() const { return total_; }

 private:
  const int per_caller_;
  const int total_;
  const std::string what_;
  const std::string hint_;
  absl::Mutex mu_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  int all_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cart::server
