#pragma once

// The worker's device heartbeat: a thread that reads the device every `interval` (running or
// idle) and sends the readings to cartd's ReportDevice, keeping what a failed call did not
// deliver (up to kMaxPending readings, oldest dropped first) for the next one. cartd exports the
// latest reading in /metrics and keeps a short history for the dashboard (docs/design.md
// "Watching the fleet"). Depends on rpc/ only: the reading comes from a function, so tests give
// their own (tests/worker/device_watch_test.cc).

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cart/v1/worker.grpc.pb.h"
#include "rpc/client.h"

namespace cart::worker {

class DeviceWatch {
 public:
  // Readings held while cartd is unreachable (an hour at the default 5 s).
  static constexpr size_t kMaxPending = 720;
  // At most this many go in one call (worker.proto ReportDevice).
  static constexpr int kMaxPerCall = 1000;

  DeviceWatch(rpc::ClientConfig client, cart::v1::WorkerService::Stub* stub, std::string worker_id,
              cart::v1::DeviceInfo device, int64_t interval_ms,
              std::function<cart::v1::DeviceSample()> read);
  // Stops the thread (what is pending is dropped: it is a sample, not a result).
  ~DeviceWatch();
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

  void Start();

  // Readings delivered, dropped (cartd refused them as invalid: sending them again would be
  // refused again and hold up the rest), and the ones waiting (tests).
  int64_t delivered();
  int64_t dropped();
  size_t pending();

 private:
  void Loop();
  // One ReportDevice call with what is pending; true when cartd took it.
  bool Send();

  const rpc::ClientConfig client_;
  cart::v1::WorkerService::Stub* const stub_;
  const std::string worker_id_;
  const cart::v1::DeviceInfo device_;
  const int64_t interval_ms_;
  const std::function<cart::v1::DeviceSample()> read_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<cart::v1::DeviceSample> pending_ ABSL_GUARDED_BY(mu_);
  int64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace cart::worker
