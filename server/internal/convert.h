#pragma once

// The one place where cartd's domain records meet their wire form (cart/v1/*.proto), and where
// absl::Status becomes grpc::Status (same code, same message).

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "cart/v1/common.pb.h"
#include "cart/v1/notify.pb.h"
#include "cart/v1/scheduler.pb.h"
#include "cart/v1/worker.pb.h"
#include "server/scheduler.h"
#include "store/spending.h"
#include "store/types.h"

namespace cart::server::internal {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numbering (both follow google.rpc.Code).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// The `authorization` metadata value of a call; nullopt when absent.
inline std::optional<std::string_view> AuthorizationOf(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

v1::RunState ToProto(store::RunState state);
// A subscription as its owner sees it: a webhook URL redacted past its host (it carries a secret).
v1::SubscriptionView ToProto(const store::Subscription& sub);
v1::NotificationView ToProto(const store::NotificationRecord& n);
v1::SpendingView ToProto(const store::Spending& spending, const store::EnergyPrices& prices);
v1::BudgetView ToProto(const BudgetLine& budget);
v1::JobKind ToProto(JobKind kind);
v1::EvalItems ToProto(const store::EvalItems& items);
store::EvalItems FromProto(const v1::EvalItems& items);
// nullopt for RUN_STATE_UNSPECIFIED and unknown values.
std::optional<store::RunState> FromProto(v1::RunState state);

// `summaries` (may be null): the latest value of each metric goes into RunView.latest;
// `with_config`: config_yaml is filled in (GetRun only).
v1::RunView ToRunView(const RunInfo& info, const std::vector<store::MetricSummary>* summaries,
                      bool with_config);
// With `forecast`: the sweep's expected finish and how many runs have an estimate.
v1::SweepView ToSweepView(const store::SweepRecord& sweep, const Forecast* forecast = nullptr);
// A run's or sweep's tags and note, appended to `tag_views` and written into `note_view`.
void ToAnnotationViews(const std::vector<store::Tag>& tags, const store::Note& note,
                       google::protobuf::RepeatedPtrField<v1::Tag>* tag_views, v1::Note* note_view);
v1::CheckpointView ToCheckpointView(const store::CheckpointRecord& checkpoint, bool final);
v1::RunEvent ToRunEvent(const store::EventRecord& event);
v1::AnnotationHistoryEntry ToProto(const store::AnnotationEvent& event);
v1::AttemptView ToProto(const store::AttemptRecord& attempt);
v1::WorkerView ToWorkerView(const WorkerStatus& worker);
v1::Job ToJob(const Job& job, absl::Duration lease_ttl);
v1::CheckpointRef ToCheckpointRef(const store::CheckpointRecord& checkpoint);

// Data lineage rows: an identity with an empty sha256 is "not recorded yet" on the wire.
v1::DataIdentity ToProto(const store::RunDataRecord& record);
store::RunDataRecord FromProto(const v1::DataIdentity& identity);

// A worker's attempt outcome; nullopt for OUTCOME_UNSPECIFIED and unknown values.
std::optional<store::AttemptOutcome> FromProto(v1::JobResult::Outcome outcome);
// The checkpoint a worker reports, stored under `path` (the artifact store's name for its blob).
store::NewCheckpoint FromProto(const v1::CheckpointRef& ref, std::string path);
store::LogLine FromProto(const v1::LogLine& line);
v1::RunLogLine ToRunLogLine(const store::LogLine& line);

store::MetricPoint FromProto(const v1::MetricPoint& point);
v1::MetricPoint ToProto(const store::MetricPoint& point);
// Points [begin, end) as columns: each metric name once, each point an index into the names.
v1::MetricColumns ToMetricColumns(const store::MetricPoint* begin, const store::MetricPoint* end);
// A device reading off the wire. InvalidArgument naming the field for a time after
// `latest_us`, a utilisation outside 0..1, memory outside 0..2^40 MiB, a clock outside 0..10^6
// MHz, or a non-finite temperature or power.
absl::StatusOr<DeviceSample> FromProto(const v1::DeviceSample& sample, int64_t latest_us);
v1::DeviceSample ToProto(const DeviceSample& sample);

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace cart::server::internal
