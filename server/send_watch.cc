#include "server/send_watch.h"

#include <grpcpp/server_context.h>

#include <algorithm>

namespace cart::server {

SendWatch::SendWatch(absl::Duration send_timeout)
    : send_timeout_(send_timeout), thread_([this] { Loop(); }) {}

SendWatch::~SendWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void SendWatch::Arm(grpc::ServerContext* context) {
  absl::MutexLock lock(&mu_);
  armed_[context] = absl::Now() + send_timeout_;
}

void SendWatch::Disarm(grpc::ServerContext* context) {
  absl::MutexLock lock(&mu_);
  armed_.erase(context);
}

int64_t SendWatch::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void SendWatch::Loop() {
  const absl::Duration tick =
      std::clamp(send_timeout_ / 4, absl::Milliseconds(5), absl::Milliseconds(250));
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    for (auto it = armed_.begin(); it != armed_.end();) {
      if (now > it->second) {
        // Under the lock: the handler cannot disarm (and so return) while this runs.
        it->first->TryCancel();
        ++cancelled_;
        it = armed_.erase(it);
      } else {
        ++it;
      }
    }
    mu_.AwaitWithTimeout(absl::Condition(&stop_), tick);
  }
}

}  // namespace cart::server
