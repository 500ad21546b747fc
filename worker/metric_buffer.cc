#include "worker/metric_buffer.h"

namespace cart::worker {

// absl::Mutex re-evaluates an Await condition whenever the mutex is released, so the waits below
// need no condition variable: Ack and Close release mu_ after changing what the waiters test.

void MetricBuffer::Add(std::vector<Point> points) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || points_.size() < capacity_;
  };
  for (Point& p : points) {
    mu_.Await(absl::Condition(&room));
    if (closed_) return;
    points_.push_back(std::move(p));
  }
}

std::vector<Point> MetricBuffer::NextBatch(size_t max) {
  absl::MutexLock lock(&mu_);
  std::vector<Point> out;
  while (sent_ < points_.size() && out.size() < max) out.push_back(points_[sent_++]);
  return out;
}

size_t MetricBuffer::Ack(int64_t acked_step) {
  absl::MutexLock lock(&mu_);
  // Only points sent on this connection: a point of the acknowledged step that was added after
  // its batch left (an evaluation logged at the step the training metrics just reported) has
  // not reached cartd yet.
  size_t dropped = 0;
  while (dropped < sent_ && points_.front().step <= acked_step) {
    points_.pop_front();
    ++dropped;
  }
  sent_ -= dropped;
  return dropped;
}

void MetricBuffer::Rewind() {
  absl::MutexLock lock(&mu_);
  sent_ = 0;
}

void MetricBuffer::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

size_t MetricBuffer::unacked() const {
  absl::MutexLock lock(&mu_);
  return points_.size();
}

size_t MetricBuffer::unsent() const {
  absl::MutexLock lock(&mu_);
  return points_.size() - sent_;
}

bool MetricBuffer::WaitEmpty(int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return points_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), absl::Milliseconds(timeout_ms));
}

}  // namespace cart::worker
