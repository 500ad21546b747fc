#pragma once

// The results tables cartd's QueryTable answers (pivot, best, deltas, series, ranks;
// proto/cart/v1/scheduler.proto), computed from a RunStore opened on a database file instead:
// what `cart results --db` and cartlab's open_db(...).table() print, equal to cartd's answer over
// the same database.

#include "absl/status/statusor.h"
#include "cart/v1/scheduler.pb.h"
#include "store/run_store.h"

namespace cart::server {

// InvalidArgument for an unknown table, a missing field (named) or a baseline that is no group;
// the store's NotFound for an unknown metric or key. Reads only; thread-safe as the store is.
absl::StatusOr<v1::Table> QueryTableOverStore(store::RunStore& store,
                                              const v1::QueryTableRequest& request);

}  // namespace cart::server
