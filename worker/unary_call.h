#pragma once

// A unary call to cartd that a worker makes beside its job's stream (RecordRunData,
// RecordEvalItems): retried a few times with backoff on a transport or server error, not on an
// answer a retry cannot change (fenced, refused, malformed, unknown, or a call an older cartd
// does not have).

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "rpc/client.h"

namespace cart::worker {

// `call(ctx)` makes the call on a prepared context (30 s deadline); the last error, or OK.
template <typename Call>
absl::Status CallWithRetries(const rpc::ClientConfig& client, const Call& call) {
  absl::Status last;
  int64_t backoff_ms = 200;
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, client, 30'000);
    last = rpc::FromGrpc(call(ctx));
    if (last.ok()) return last;
    if (absl::IsFailedPrecondition(last) || absl::IsInvalidArgument(last) ||
        absl::IsPermissionDenied(last) || absl::IsUnauthenticated(last) || absl::IsNotFound(last) ||
        absl::IsUnimplemented(last)) {  // an older cartd
      return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 3000);
  }
  return last;
}

}  // namespace cart::worker
