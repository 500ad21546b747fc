#pragma once

// Counters the scheduler keeps for /metrics (server/http/prometheus.h turns them into Prometheus
// series): lock-free, so counting costs the ingest path a few atomic adds. Everything here only
// grows while cartd runs and starts from zero at each start (Prometheus's counter semantics).

#include <array>
#include <atomic>
#include <cstdint>

namespace cart::server {

class SchedulerCounters {
 public:
  // Upper bounds, seconds, of the ingest latency histogram's buckets (+Inf is implicit).
  static constexpr std::array<double, 12> kLatencyBounds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5};

  struct Snapshot {
    int64_t lease_expiries = 0;   // leases taken back because they lapsed
    int64_t retries = 0;          // attempts that ended FAILED / OUT_OF_MEMORY and were retried
    int64_t jobs_handed_out = 0;  // AcquireJob answers that carried a job
    int64_t preemptions = 0;      // runs asked to stop at a checkpoint for other work
    int64_t metric_batches = 0;   // AppendMetrics calls stored
    int64_t metric_points = 0;    // points in them
    // Ingest latency (one AppendMetrics, store commit included): per-bucket counts (not
    // cumulative; the last is above every bound) and the sum in seconds.
    std::array<int64_t, kLatencyBounds.size() + 1> latency_buckets{};
    double latency_sum_s = 0;
  };

  void AddLeaseExpiries(int64_t n) { lease_expiries_.fetch_add(n, std::memory_order_relaxed); }
  void AddRetry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  void AddJobHandedOut() { jobs_.fetch_add(1, std::memory_order_relaxed); }
  void AddPreemption() { preemptions_.fetch_add(1, std::memory_order_relaxed); }
  void AddIngest(int64_t points, double seconds) {
    batches_.fetch_add(1, std::memory_order_relaxed);
    points_.fetch_add(points, std::memory_order_relaxed);
    size_t bucket = 0;
    while (bucket < kLatencyBounds.size() && seconds > kLatencyBounds[bucket]) ++bucket;
    buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
    latency_sum_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
  }

  Snapshot Read() const {
    Snapshot s;
    s.lease_expiries = lease_expiries_.load(std::memory_order_relaxed);
    s.retries = retries_.load(std::memory_order_relaxed);
    s.jobs_handed_out = jobs_.load(std::memory_order_relaxed);
    s.preemptions = preemptions_.load(std::memory_order_relaxed);
    s.metric_batches = batches_.load(std::memory_order_relaxed);
    s.metric_points = points_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < buckets_.size(); ++i) {
      s.latency_buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    }
    s.latency_sum_s = static_cast<double>(latency_sum_ns_.load(std::memory_order_relaxed)) / 1e9;
    return s;
  }

 private:
  std::atomic<int64_t> lease_expiries_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> jobs_{0};
  std::atomic<int64_t> preemptions_{0};
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> points_{0};
  std::array<std::atomic<int64_t>, kLatencyBounds.size() + 1> buckets_{};
  std::atomic<int64_t> latency_sum_ns_{0};
};

}  // namespace cart::server
