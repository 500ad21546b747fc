#pragma once

// The gRPC services of cartd: thin handlers that check the caller's token, validate the request,
// call the Scheduler (never the store) or the ArtifactStore and translate the result
// (scheduler.proto and worker.proto document each RPC's idempotency and codes). Synchronous API:
// every in-flight call, long polls and streams included, holds one server thread
// (ServerConfig::max_threads).

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "cart/v1/notify.grpc.pb.h"
#include "cart/v1/scheduler.grpc.pb.h"
#include "cart/v1/worker.grpc.pb.h"
#include "server/artifacts.h"
#include "server/auth.h"
#include "server/caller_slots.h"
#include "server/notify/notifier.h"
#include "server/scheduler.h"
#include "server/send_watch.h"
#include "store/spending.h"

namespace cart::server::internal {

// What both services share; not owned, all outlive the services.
struct ServiceContext {
  Scheduler* scheduler = nullptr;
  ArtifactStore* artifacts = nullptr;
  const TokenTable* tokens = nullptr;
  CallerSlots* followers = nullptr;      // follow streams; nullptr: unbounded
  CallerSlots* big_reads = nullptr;      // ListRuns, GetSweep, QueryTable; nullptr: unbounded
  CallerSlots* downloads = nullptr;      // GetCheckpoint, GetArtifact streams; nullptr: unbounded
  CallerSlots* polls = nullptr;          // AcquireJob long polls, per token; nullptr: unbounded
  SendWatch* send_watch = nullptr;       // send deadline of download streams; nullptr: none
  int max_workers_per_token = 0;         // worker ids one worker token may register; 0: no bound
  int min_worker_protocol = 1;           // older workers are refused at registration
  size_t max_answer_bytes = 8 << 20;     // of run views in one answer (ServerConfig)
  notify::Notifier* notifier = nullptr;  // NotifyService
  store::EnergyPrices prices;            // what spending views are priced at
};

// Sends the artifact `sha256` in 1 MiB chunks, the first carrying its hash and size (GetArtifact,
// GetCheckpoint). NOT_FOUND when it is not stored; DATA_LOSS when its bytes no longer match.
// Each chunk's write is cut by `watch` (when given) past its send deadline: the call ends
// CANCELLED.
grpc::Status StreamArtifact(const ArtifactStore& artifacts, const std::string& sha256,
                            grpc::ServerContext* context, SendWatch* watch,
                            grpc::ServerWriter<v1::ArtifactChunk>& writer);

class SchedulerServiceImpl final : public v1::SchedulerService::Service {
 public:
  explicit SchedulerServiceImpl(ServiceContext context) : ctx_(std::move(context)) {}

  grpc::Status SubmitSweep(grpc::ServerContext* context, const v1::SubmitSweepRequest* request,
                           v1::SubmitSweepResponse* response) override;
  grpc::Status ListSweeps(grpc::ServerContext* context, const v1::ListSweepsRequest* request,
                          v1::ListSweepsResponse* response) override;
  grpc::Status GetSweep(grpc::ServerContext* context, const v1::GetSweepRequest* request,
                        v1::GetSweepResponse* response) override;
  grpc::Status CancelSweep(grpc::ServerContext* context, const v1::CancelSweepRequest* request,
                           v1::CancelSweepResponse* response) override;
  grpc::Status ResumeSweep(grpc::ServerContext* context, const v1::ResumeSweepRequest* request,
                           v1::ResumeSweepResponse* response) override;
  grpc::Status DeleteSweep(grpc::ServerContext* context, const v1::DeleteSweepRequest* request,
                           v1::DeleteSweepResponse* response) override;
  grpc::Status SetSweepPriority(grpc::ServerContext* context,
                                const v1::SetSweepPriorityRequest* request,
                                v1::SetSweepPriorityResponse* response) override;
  grpc::Status ListBudgets(grpc::ServerContext* context, const v1::ListBudgetsRequest* request,
                           v1::ListBudgetsResponse* response) override;
  grpc::Status SetBudget(grpc::ServerContext* context, const v1::SetBudgetRequest* request,
                         v1::BudgetView* response) override;
  grpc::Status ListRuns(grpc::ServerContext* context, const v1::ListRunsRequest* request,
                        v1::ListRunsResponse* response) override;
  grpc::Status GetRun(grpc::ServerContext* context, const v1::GetRunRequest* request,
                      v1::GetRunResponse* response) override;
  grpc::Status CancelRun(grpc::ServerContext* context, const v1::CancelRunRequest* request,
                         v1::RunResponse* response) override;
  grpc::Status ResumeRun(grpc::ServerContext* context, const v1::ResumeRunRequest* request,
                         v1::RunResponse* response) override;
  grpc::Status ExtendRun(grpc::ServerContext* context, const v1::ExtendRunRequest* request,
                         v1::RunResponse* response) override;
  grpc::Status ForecastRuns(grpc::ServerContext* context, const v1::ForecastRunsRequest* request,
                            v1::ForecastRunsResponse* response) override;
  grpc::Status ApplyPlan(grpc::ServerContext* context, const v1::ApplyPlanRequest* request,
                         v1::ApplyPlanResponse* response) override;
  grpc::Status ListPlans(grpc::ServerContext* context, const v1::ListPlansRequest* request,
                         v1::ListPlansResponse* response) override;
  grpc::Status GetEvalItems(grpc::ServerContext* context, const v1::GetEvalItemsRequest* request,
                            v1::GetEvalItemsResponse* response) override;
  grpc::Status SetRunDeviceClass(grpc::ServerContext* context,
                                 const v1::SetRunDeviceClassRequest* request,
                                 v1::RunResponse* response) override;
  grpc::Status StreamMetrics(grpc::ServerContext* context, const v1::StreamMetricsRequest* request,
                             grpc::ServerWriter<v1::MetricBatchView>* writer) override;
  grpc::Status StreamRunLog(grpc::ServerContext* context, const v1::StreamRunLogRequest* request,
                            grpc::ServerWriter<v1::RunLogView>* writer) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* context, const v1::GetCheckpointRequest* request,
                             grpc::ServerWriter<v1::ArtifactChunk>* writer) override;
  grpc::Status QueryTable(grpc::ServerContext* context, const v1::QueryTableRequest* request,
                          v1::Table* response) override;
  grpc::Status Annotate(grpc::ServerContext* context, const v1::AnnotateRequest* request,
                        v1::AnnotateResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context, const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override;

 private:
  // The caller's audit name ("user:alice"), or the auth error.
  absl::StatusOr<std::string> Caller(grpc::ServerContext* context, const char* method) const;
  grpc::Status RunView(int64_t run_id, v1::RunResponse* response);

  const ServiceContext ctx_;
};

// NotifyService: subscriptions and their notifications (notify.proto), over the Notifier.
class NotifyServiceImpl final : public v1::NotifyService::Service {
 public:
  explicit NotifyServiceImpl(ServiceContext context) : ctx_(std::move(context)) {}

  grpc::Status Subscribe(grpc::ServerContext* context, const v1::SubscribeRequest* request,
                         v1::SubscriptionView* response) override;
  grpc::Status ListSubscriptions(grpc::ServerContext* context,
                                 const v1::ListSubscriptionsRequest* request,
                                 v1::ListSubscriptionsResponse* response) override;
  grpc::Status Unsubscribe(grpc::ServerContext* context, const v1::UnsubscribeRequest* request,
                           v1::UnsubscribeResponse* response) override;
  grpc::Status SendTest(grpc::ServerContext* context, const v1::SendTestRequest* request,
                        v1::SendTestResponse* response) override;
  grpc::Status NotificationLog(grpc::ServerContext* context,
                               const v1::NotificationLogRequest* request,
                               v1::NotificationLogResponse* response) override;

 private:
  absl::StatusOr<std::string> Caller(grpc::ServerContext* context, const char* method) const;

  const ServiceContext ctx_;
};

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  explicit WorkerServiceImpl(ServiceContext context) : ctx_(std::move(context)) {}

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status AcquireJob(grpc::ServerContext* context, const v1::AcquireJobRequest* request,
                          v1::AcquireJobResponse* response) override;
  grpc::Status RunJob(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SchedulerControl, v1::WorkerReport>* stream) override;
  grpc::Status PutArtifact(grpc::ServerContext* context,
                           grpc::ServerReader<v1::ArtifactChunk>* reader,
                           v1::PutArtifactResponse* response) override;
  grpc::Status RecordArtifact(grpc::ServerContext* context,
                              const v1::RecordArtifactRequest* request,
                              v1::RecordArtifactResponse* response) override;
  grpc::Status GetArtifact(grpc::ServerContext* context, const v1::GetArtifactRequest* request,
                           grpc::ServerWriter<v1::ArtifactChunk>* writer) override;
  grpc::Status ReportDevice(grpc::ServerContext* context, const v1::DeviceReport* request,
                            v1::DeviceReportResponse* response) override;
  grpc::Status RecordRunData(grpc::ServerContext* context, const v1::RecordRunDataRequest* request,
                             v1::RecordRunDataResponse* response) override;
  grpc::Status RecordEvalItems(grpc::ServerContext* context,
                               const v1::RecordEvalItemsRequest* request,
                               v1::RecordEvalItemsResponse* response) override;

 private:
  absl::StatusOr<Principal> Check(grpc::ServerContext* context, const char* method) const;
  // PermissionDenied unless `who` may act as `worker_id` (MayActAs).
  // The worker attempt `attempt` of `run_id` is leased to, when the caller may act as it: only that
  // worker records for the attempt (another worker of the same token would record in its name).
  // `claimed` is the worker id the request names (empty: not checked beyond the token); `what`
  // says what it records ("data", "items").
  absl::StatusOr<std::string> LeasedWorker(const Principal& who, const char* method, int64_t run_id,
                                           int64_t attempt, const std::string& claimed,
                                           const char* what) const;
  absl::Status CheckWorkerId(const Principal& who, const char* method,
                             const std::string& worker_id) const;

  const ServiceContext ctx_;
};

}  // namespace cart::server::internal
