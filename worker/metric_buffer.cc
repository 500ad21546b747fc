#include "worker/metric_buffer.h"

#include <chrono>

namespace cart::worker {

void MetricBuffer::Add(std::vector<Point> points) {
  std::unique_lock<std::mutex> lock(mu_);
  for (Point& p : points) {
    changed_.wait(lock, [&] { return closed_ || points_.size() < capacity_; });
    if (closed_) return;
    points_.push_back(std::move(p));
  }
  changed_.notify_all();
}

std::vector<Point> MetricBuffer::NextBatch(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Point> out;
  while (sent_ < points_.size() && out.size() < max) out.push_back(points_[sent_++]);
  return out;
}

size_t MetricBuffer::Ack(int64_t acked_step) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t dropped = 0;
  while (!points_.empty() && points_.front().step <= acked_step) {
    points_.pop_front();
    ++dropped;
  }
  sent_ = sent_ > dropped ? sent_ - dropped : 0;
  changed_.notify_all();
  return dropped;
}

void MetricBuffer::Rewind() {
  std::lock_guard<std::mutex> lock(mu_);
  sent_ = 0;
}

void MetricBuffer::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  changed_.notify_all();
}

size_t MetricBuffer::unacked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return points_.size();
}

size_t MetricBuffer::unsent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return points_.size() - sent_;
}

bool MetricBuffer::WaitEmpty(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return points_.empty(); });
}

}  // namespace cart::worker
