#pragma once

// The worker's outbox of metric points: bounded, ordered by step, kept until cartd acknowledges
// them. A reconnect rewinds to the first unacknowledged point, so nothing acknowledged is sent
// twice in vain and nothing unacknowledged is lost (cartd's ingest is idempotent on
// (run, step, name), so a point sent twice is stored once). Thread-safe.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cart::worker {

struct Point {
  int64_t step = 0;
  std::string name;
  double value = 0;
  int64_t wall_time_us = 0;
};

class MetricBuffer {
 public:
  // `capacity`: points held before Add blocks (backpressure on the trainer).
  explicit MetricBuffer(size_t capacity) : capacity_(capacity) {}

  // Appends points (steps non-decreasing across calls). Blocks while the buffer is full, until
  // acks make room or Close() is called.
  void Add(std::vector<Point> points);
  // Up to `max` points not yet sent on the current connection; marks them sent.
  std::vector<Point> NextBatch(size_t max);
  // cartd stored every point with step <= acked_step that was sent on the current connection:
  // drops those (not a point of that step added after its batch was sent). Returns how many.
  size_t Ack(int64_t acked_step);
  // After a reconnect: everything unacknowledged is to be sent again.
  void Rewind();
  // Wakes blocked Add calls for good (the job is over).
  void Close();

  size_t unacked() const;
  size_t unsent() const;
  // Waits until every point is acknowledged, or `timeout_ms` passes. True when empty.
  bool WaitEmpty(int64_t timeout_ms);

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<Point> points_ ABSL_GUARDED_BY(mu_);  // unacknowledged, step order
  // points_[0, sent_) were sent on the current connection.
  size_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cart::worker
