#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cart {

// Source of time for everything that schedules, leases or timestamps. Injected so that tests can
// drive time by hand (FakeClock) instead of sleeping. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time; used for timestamps stored in the database and for lease deadlines.
  virtual absl::Time Now() const = 0;

  // The process-wide real clock. Never null, never destroyed.
  static Clock* Real();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override;
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// Unix time in microseconds, the unit of every timestamp column and proto field.
inline int64_t ToUnixMicrosValue(absl::Time t) { return absl::ToUnixMicros(t); }

}  // namespace cart
