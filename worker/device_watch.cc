#include "worker/device_watch.h"

#include <algorithm>
#include <utility>

namespace cart::worker {

DeviceWatch::DeviceWatch(rpc::ClientConfig client, cart::v1::WorkerService::Stub* stub,
                         std::string worker_id, cart::v1::DeviceInfo device, int64_t interval_ms,
                         std::function<cart::v1::DeviceSample()> read)
    : client_(std::move(client)),
      stub_(stub),
      worker_id_(std::move(worker_id)),
      device_(std::move(device)),
      interval_ms_(std::max<int64_t>(interval_ms, 100)),
      read_(std::move(read)) {}

DeviceWatch::~DeviceWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void DeviceWatch::Start() {
  thread_ = std::thread([this] { Loop(); });
}

int64_t DeviceWatch::delivered() {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

int64_t DeviceWatch::dropped() {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

size_t DeviceWatch::pending() {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

void DeviceWatch::Loop() {
  while (true) {
    cart::v1::DeviceSample sample = read_();
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      pending_.push_back(std::move(sample));
      while (pending_.size() > kMaxPending) pending_.pop_front();
    }
    Send();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(interval_ms_));
    if (stop_) return;
  }
}

bool DeviceWatch::Send() {
  cart::v1::DeviceReport report;
  report.set_worker_id(worker_id_);
  *report.mutable_device() = device_;
  {
    absl::MutexLock lock(&mu_);
    const size_t n = std::min<size_t>(pending_.size(), kMaxPerCall);
    for (size_t i = 0; i < n; ++i) *report.add_samples() = pending_[i];
  }
  if (report.samples_size() == 0) return true;
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client_, std::min<int64_t>(interval_ms_, 10'000));
  cart::v1::DeviceReportResponse response;
  const grpc::Status status = stub_->ReportDevice(&ctx, report, &response);
  const bool invalid = status.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
  if (!status.ok() && !invalid) return false;  // cartd away, or refusing us: keep them
  absl::MutexLock lock(&mu_);
  // Only this thread adds and removes readings, so the first samples_size() are those sent.
  const size_t sent = std::min<size_t>(pending_.size(), report.samples_size());
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(sent));
  (invalid ? dropped_ : delivered_) += static_cast<int64_t>(sent);
  return status.ok();
}

}  // namespace cart::worker
