#pragma once

// QueryTable: a results request (scheduler.proto QueryTableRequest) answered by the store's results
// layer (store/results.h) and laid out as a Table of rows the CLI and dashboard print.
//
//   pivot   metric by `rows` × `cols` (mean ± std over seeds); first column holds the row value
//   best    the best `cols` value of each `rows` value (lower_is_better decides)
//   deltas  every group of `group_by` keys against `baseline` ("key=value,key=value")
//   series  one run's metric by step, downsampled to max_points
//   ranks   stage comparison of exactly two sweeps over the configs named by `group_by`
//           (default "d,R,P"); the title carries Spearman's ρ
//
// InvalidArgument for an unknown table, a missing field (message names it) or a baseline that is
// not one of the groups; the store's NotFound for an unknown metric or key.

#include "absl/status/statusor.h"
#include "cart/v1/scheduler.pb.h"
#include "server/scheduler.h"

namespace cart::server::internal {

absl::StatusOr<v1::Table> QueryTable(Scheduler& results, const v1::QueryTableRequest& request);

}  // namespace cart::server::internal
