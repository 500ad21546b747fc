#pragma once

// Send deadlines for cartd's streaming calls (checkpoint downloads): a write that has not gone
// out within the deadline cancels its call. gRPC's synchronous server blocks a handler's Write
// while the client reads nothing, and nothing else ends it: a thousand downloads opened and
// never read held a thousand server threads and 3.3 GB of cartd's memory. One thread looks at
// the armed calls four times per deadline (at least every 5 ms, at most every 250 ms).
//
// Thread-safety: every method is thread-safe. A call is armed only while its handler writes, so
// the watch never touches a finished call's context.

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContext;
}

namespace cart::server {

class SendWatch {
 public:
  explicit SendWatch(absl::Duration send_timeout);
  ~SendWatch();
  SendWatch(const SendWatch&) = delete;
  SendWatch& operator=(const SendWatch&) = delete;

  // Runs `write` (one Write on `context`'s stream), cancelling the call if it has not returned
  // within the send timeout; returns what `write` returned (false once cancelled).
  template <class Write>
  bool Guard(grpc::ServerContext* context, Write&& write) {
    Arm(context);
    const bool ok = write();
    Disarm(context);
    return ok;
  }

  absl::Duration send_timeout() const { return send_timeout_; }
  int64_t cancelled() const;  // calls cut so far

 private:
  void Arm(grpc::ServerContext* context);
  void Disarm(grpc::ServerContext* context);
  void Loop();

  const absl::Duration send_timeout_;
  mutable absl::Mutex mu_;
  std::map<grpc::ServerContext*, absl::Time> armed_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace cart::server
