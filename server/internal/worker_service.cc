// WorkerService: what cart-worker calls. Every handler starts with the token check (worker or
// admin).

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "common/status.h"
#include "common/strings.h"
#include "common/version.h"
#include "server/internal/convert.h"
#include "server/internal/services.h"

namespace cart::server::internal {
namespace {

// Artifacts are sent in chunks of this size (worker.proto: at most 1 MiB).
constexpr size_t kChunkBytes = size_t{1} << 20;
// MetricBatch: at most this many points (worker.proto).
constexpr int kMaxPointsPerBatch = 10'000;
// ReportDevice: at most this many samples per call, none further ahead of cartd's clock than
// this (a worker's clock may run a little fast; one far ahead would hide every later reading).
constexpr int kMaxDeviceSamples = 1000;
constexpr int64_t kMaxAheadUs = int64_t{10} * 60 * 1'000'000;
// The most free disk a worker may report (1 EiB in MiB): a larger number is a bug, not a disk.
constexpr int64_t kMostDiskMib = int64_t{1} << 40;

// How a worker-side caller is counted in the per-caller bounds: by token ("worker:box3").
std::string Caller(const Principal& who) { return CallerName(who); }

// The RunJob stream as the scheduler sees it. Writes (acks from the handler thread, controls from
// whichever thread cancels or drains) are serialized by mu_; Read runs concurrently on the handler
// thread, which gRPC allows.
class RunJobStream final : public AttemptStream {
 public:
  RunJobStream(grpc::ServerContext* context,
               grpc::ServerReaderWriter<v1::SchedulerControl, v1::WorkerReport>* stream)
      : context_(context), stream_(stream) {}

  void Send(const Control& control) override {
    v1::SchedulerControl message;
    switch (control.kind) {
      case Control::Kind::kCancel:
        message.mutable_cancel()->set_reason(control.reason);
        break;
      case Control::Kind::kDrain:
        message.mutable_drain()->set_reason(control.reason);
        break;
      case Control::Kind::kPreempt:
        message.mutable_preempt()->set_reason(control.reason);
        break;
    }
    Write(message);
  }

  void Close() override {
    absl::MutexLock lock(&mu_);
    if (!ended_) context_->TryCancel();
  }

  bool Write(const v1::SchedulerControl& message) {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    return stream_->Write(message);
  }

  // The handler is returning: no more writes through this object.
  void End() {
    absl::MutexLock lock(&mu_);
    ended_ = true;
  }

 private:
  absl::Mutex mu_;
  grpc::ServerContext* const context_;
  grpc::ServerReaderWriter<v1::SchedulerControl, v1::WorkerReport>* const stream_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

// The reports of one attempt on its RunJob stream after the hello, one method per kind. Each
// returns nullopt to read on, or the status the stream ends with.
class AttemptReports {
 public:
  AttemptReports(const ServiceContext& ctx, int64_t run_id, int64_t attempt, RunJobStream& sink)
      : ctx_(ctx), run_id_(run_id), attempt_(attempt), sink_(sink) {}

  std::optional<grpc::Status> Handle(const v1::WorkerReport& report) {
    if (report.run_id() != run_id_ || report.attempt() != attempt_) {
      return ToGrpc(absl::InvalidArgumentError(
          StrCat("RunJob: report for run ", report.run_id(), " attempt ", report.attempt(),
                 " on the stream of run ", run_id_, " attempt ", attempt_)));
    }
    switch (report.body_case()) {
      case v1::WorkerReport::kHello:
        return std::nullopt;  // a repeated hello changes nothing
      case v1::WorkerReport::kHeartbeat:
        return Heartbeat(report.heartbeat());
      case v1::WorkerReport::kMetrics:
        return Metrics(report.metrics());
      case v1::WorkerReport::kCheckpoint:
        return Checkpoint(report.checkpoint().checkpoint());
      case v1::WorkerReport::kLog:
        return Log(report.log());
      case v1::WorkerReport::kResult:
        return Result(report.result());
      case v1::WorkerReport::BODY_NOT_SET:
        break;
    }
    return ToGrpc(absl::InvalidArgumentError("RunJob: a report without a body"));
  }

 private:
  // Extends the lease; a cancel requested since is sent once.
  std::optional<grpc::Status> Heartbeat(const v1::Heartbeat& heartbeat) {
    absl::StatusOr<bool> cancel = ctx_.scheduler->Heartbeat(run_id_, attempt_, heartbeat.step());
    if (!cancel.ok()) return ToGrpc(cancel.status());
    if (heartbeat.has_energy()) {
      RecordEnergy(heartbeat.energy());
    }
    if (*cancel && !cancel_sent_) {
      cancel_sent_ = true;
      sink_.Send(Control{Control::Kind::kCancel, "cancel requested"});
    }
    return std::nullopt;
  }

  // Stores the batch and acknowledges it.
  std::optional<grpc::Status> Metrics(const v1::MetricBatch& metrics) {
    const auto& points = metrics.points();
    if (points.size() > kMaxPointsPerBatch) {
      return ToGrpc(
          absl::InvalidArgumentError(StrCat("RunJob: metric batch of ", points.size(),
                                            " points; the limit is ", kMaxPointsPerBatch)));
    }
    if (points.empty()) return std::nullopt;
    std::vector<store::MetricPoint> batch;
    batch.reserve(points.size());
    for (const v1::MetricPoint& point : points) batch.push_back(FromProto(point));
    absl::StatusOr<int64_t> acked =
        ctx_.scheduler->AppendMetrics(run_id_, attempt_, std::move(batch));
    if (!acked.ok()) return ToGrpc(acked.status());
    v1::SchedulerControl ack;
    ack.mutable_ack()->set_acked_step(*acked);
    if (!sink_.Write(ack)) return grpc::Status::OK;  // the worker went away; it resends
    return std::nullopt;
  }

  // Records a checkpoint whose blob is already stored (uploaded, or written to the shared store
  // and recorded).
  std::optional<grpc::Status> Checkpoint(const v1::CheckpointRef& ref) {
    // Asked inside the store's write, so that a sweep deleted meanwhile cannot remove the same
    // blob (shared by content) between this check and the record.
    auto blob_present = [&]() -> absl::Status {
      CART_ASSIGN_OR_RETURN(std::optional<int64_t> size, ctx_.artifacts->Size(ref.sha256()));
      if (!size.has_value() || *size != ref.size_bytes()) {
        return absl::FailedPreconditionError(
            StrCat("RunJob: checkpoint at step ", ref.step(), " names artifact ", ref.sha256(),
                   " of ", ref.size_bytes(), " bytes, which is not stored; PutArtifact first"));
      }
      return absl::OkStatus();
    };
    absl::StatusOr<store::CheckpointRecord> recorded = ctx_.scheduler->RecordCheckpoint(
        run_id_, attempt_, FromProto(ref, ArtifactStore::RelativePath(ref.sha256())), blob_present);
    if (!recorded.ok()) return ToGrpc(recorded.status());
    return std::nullopt;
  }

  std::optional<grpc::Status> Log(const v1::LogLine& line) {
    // Worker lines are numbered from 1: the number makes a resent line count once and bounds
    // how many an attempt stores (max_log_lines_per_attempt).
    if (line.seq() < 1) {
      return ToGrpc(absl::InvalidArgumentError(
          StrCat("RunJob: log line with seq ", line.seq(), "; seq starts at 1")));
    }
    absl::Status logged = ctx_.scheduler->AppendLog(run_id_, attempt_, {FromProto(line)});
    if (!logged.ok()) return ToGrpc(logged);
    return std::nullopt;
  }

  // The attempt's energy so far. A reading cartd cannot take (a malformed value, a counter it
  // does not know, a write that failed) is said in cartd's log and dropped: energy never fails
  // the report it came with.
  void RecordEnergy(const v1::AttemptEnergy& energy) {
    absl::Status recorded =
        ctx_.scheduler->RecordEnergy(run_id_, attempt_, energy.joules(), energy.source());
    if (!recorded.ok() && !energy_error_said_) {
      energy_error_said_ = true;
      std::fprintf(stderr, "cartd: run %lld attempt %lld: energy reading not stored: %s\n",
                   static_cast<long long>(run_id_), static_cast<long long>(attempt_),
                   std::string(recorded.message()).c_str());
    }
  }

  // The attempt's end: the stream ends with it.
  grpc::Status Result(const v1::JobResult& result) {
    const std::optional<store::AttemptOutcome> outcome = FromProto(result.outcome());
    if (!outcome) {
      return ToGrpc(
          absl::InvalidArgumentError(StrCat("RunJob: result of run ", run_id_, " has no outcome")));
    }
    std::optional<store::Divergence> diverged;
    if (result.has_diverged()) {
      if (*outcome != store::AttemptOutcome::kFailed) {
        return ToGrpc(absl::InvalidArgumentError(
            StrCat("RunJob: run ", run_id_, ": a divergence comes with a FAILED result")));
      }
      diverged = store::Divergence{result.diverged().step(), result.diverged().loss()};
    }
    if (result.has_energy()) RecordEnergy(result.energy());
    return ToGrpc(
        ctx_.scheduler->ReportOutcome(run_id_, attempt_, *outcome, result.error(), diverged)
            .status());
  }

  const ServiceContext& ctx_;
  const int64_t run_id_;
  const int64_t attempt_;
  bool energy_error_said_ = false;
  RunJobStream& sink_;
  bool cancel_sent_ = false;
};

}  // namespace

grpc::Status StreamArtifact(const ArtifactStore& artifacts, const std::string& sha256,
                            grpc::ServerContext* context, SendWatch* watch,
                            grpc::ServerWriter<v1::ArtifactChunk>& writer) {
  auto write = [&](const v1::ArtifactChunk& chunk) {
    if (watch == nullptr) return writer.Write(chunk);
    return watch->Guard(context, [&] { return writer.Write(chunk); });
  };
  absl::StatusOr<std::optional<int64_t>> size = artifacts.Size(sha256);
  if (!size.ok()) return ToGrpc(size.status());
  if (!size->has_value()) {
    return ToGrpc(absl::NotFoundError(StrCat("artifact ", sha256, " is not stored")));
  }
  bool first = true;
  bool client_gone = false;
  absl::Status read = artifacts.Read(sha256, kChunkBytes, [&](std::string_view bytes) {
    v1::ArtifactChunk chunk;
    if (first) {
      chunk.set_sha256(sha256);
      chunk.set_size_bytes(**size);
      first = false;
    }
    chunk.set_data(bytes.data(), bytes.size());
    client_gone = !write(chunk);
    return !client_gone;
  });
  if (!read.ok()) return ToGrpc(read);
  if (first && !client_gone) {
    // An empty blob still announces itself.
    v1::ArtifactChunk chunk;
    chunk.set_sha256(sha256);
    chunk.set_size_bytes(0);
    write(chunk);
  }
  if (client_gone && context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the download was not read within the send deadline, or was cancelled");
  }
  return grpc::Status::OK;
}

absl::StatusOr<Principal> WorkerServiceImpl::Check(grpc::ServerContext* context,
                                                   const char* method) const {
  return ctx_.tokens->Check(AuthorizationOf(*context), Api::kWorker,
                            StrCat("WorkerService.", method));
}

absl::Status WorkerServiceImpl::CheckWorkerId(const Principal& who, const char* method,
                                              const std::string& worker_id) const {
  if (MayActAs(who, worker_id)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      StrCat("WorkerService.", method, ": token '", who.name, "' may act only as worker '",
             who.name, "' or '", who.name, "-…' / '", who.name, ".…', not as '", worker_id, "'"));
}

absl::StatusOr<std::string> WorkerServiceImpl::LeasedWorker(const Principal& who,
                                                            const char* method, int64_t run_id,
                                                            int64_t attempt,
                                                            const std::string& claimed,
                                                            const char* what) const {
  CART_ASSIGN_OR_RETURN(std::string leased, ctx_.scheduler->WorkerOfAttempt(run_id, attempt));
  CART_RETURN_IF_ERROR(CheckWorkerId(who, method, leased));
  if (!claimed.empty() && claimed != leased) {
    return absl::PermissionDeniedError(StrCat(method, ": worker '", claimed, "' may not record ",
                                              what, " for run ", run_id, " attempt ", attempt,
                                              ", leased to '", leased, "'"));
  }
  return leased;
}

// Binds `who` to the checked caller (the token's principal), or returns the auth error.
#define CART_CHECK_CALLER(who, method)                         \
  absl::StatusOr<Principal> who##_or = Check(context, method); \
  if (!who##_or.ok()) return ToGrpc(who##_or.status());        \
  const Principal& who = *who##_or;

grpc::Status WorkerServiceImpl::ReportDevice(grpc::ServerContext* context,
                                             const v1::DeviceReport* request,
                                             v1::DeviceReportResponse* response) {
  CART_CHECK_CALLER(who, "ReportDevice");
  if (absl::Status bound = CheckWorkerId(who, "ReportDevice", request->worker_id()); !bound.ok()) {
    return ToGrpc(bound);
  }
  if (request->samples_size() > kMaxDeviceSamples) {
    return ToGrpc(
        absl::InvalidArgumentError(StrCat("ReportDevice: ", request->samples_size(),
                                          " samples; at most ", kMaxDeviceSamples, " per call")));
  }
  const v1::DeviceInfo& device = request->device();
  if (device.uuid().size() > 96 || device.name().size() > 256 || device.kind().size() > 16) {
    return ToGrpc(absl::InvalidArgumentError(
        "ReportDevice: device.uuid (96 bytes), device.name (256) or device.kind (16) too long"));
  }
  const int64_t latest_us = ctx_.scheduler->NowMicros() + kMaxAheadUs;
  std::vector<DeviceSample> samples;
  samples.reserve(request->samples_size());
  for (int i = 0; i < request->samples_size(); ++i) {
    absl::StatusOr<DeviceSample> sample = FromProto(request->samples(i), latest_us);
    if (!sample.ok()) {
      return ToGrpc(absl::InvalidArgumentError(
          StrCat("ReportDevice: samples[", i, "]: ", sample.status().message())));
    }
    samples.push_back(*sample);
  }
  DeviceIdentity identity;
  identity.kind = device.kind();
  identity.name = device.name();
  identity.index = device.index();
  identity.uuid = device.uuid();
  absl::StatusOr<int> added =
      ctx_.scheduler->RecordDeviceSamples(request->worker_id(), identity, samples);
  return ToGrpc(added.status());
}

grpc::Status WorkerServiceImpl::RecordEvalItems(grpc::ServerContext* context,
                                                const v1::RecordEvalItemsRequest* request,
                                                v1::RecordEvalItemsResponse* response) {
  CART_CHECK_CALLER(who, "RecordEvalItems");
  absl::StatusOr<std::string> leased = LeasedWorker(
      who, "RecordEvalItems", request->run_id(), request->attempt(), request->worker_id(), "items");
  if (!leased.ok()) return ToGrpc(leased.status());
  std::vector<store::EvalItems> items;
  for (const v1::EvalItems& e : request->tasks()) items.push_back(FromProto(e));
  return ToGrpc(ctx_.scheduler->RecordEvalItems(request->run_id(), request->attempt(), items));
}

grpc::Status WorkerServiceImpl::RecordRunData(grpc::ServerContext* context,
                                              const v1::RecordRunDataRequest* request,
                                              v1::RecordRunDataResponse* response) {
  CART_CHECK_CALLER(who, "RecordRunData");
  // Another worker of the same token would record a false identity in the leased one's name,
  // and every later attempt would then fail its data check.
  absl::StatusOr<std::string> leased = LeasedWorker(
      who, "RecordRunData", request->run_id(), request->attempt(), request->worker_id(), "data");
  if (!leased.ok()) return ToGrpc(leased.status());
  if (request->files_size() > static_cast<int>(store::kMaxDataFiles)) {
    return ToGrpc(absl::InvalidArgumentError(StrCat("RecordRunData: ", request->files_size(),
                                                    " files; at most ", store::kMaxDataFiles)));
  }
  std::vector<store::RunDataRecord> files;
  files.reserve(request->files_size());
  for (const v1::DataIdentity& f : request->files()) files.push_back(FromProto(f));
  absl::StatusOr<std::vector<store::RunDataRecord>> recorded = ctx_.scheduler->RecordRunData(
      request->run_id(), request->attempt(), *leased, std::move(files));
  if (!recorded.ok()) return ToGrpc(recorded.status());
  for (const store::RunDataRecord& d : *recorded) *response->add_data() = ToProto(d);
  return grpc::Status::OK;
}

namespace {

// What a worker may say of itself at registration: its device memory given, each text within
// its bound, each amount within what a device can hold (2^30 MiB of memory, 2^40 MiB of disk: so
// that MiB × 2^20 cannot overflow), a reported speed from 1e-6 to 1000 × an RTX 3090 (0: measure
// it). A 4 MiB host name used to make every ListWorkers answer megabytes long, 2^44 + 1 MiB
// registered as 1 MiB, and a speed of 5e-324 planned runs to finish never.
absl::Status CheckRegistrationBounds(const v1::RegisterWorkerRequest& request) {
  if (!request.has_device() || request.device().memory_mib() <= 0) {
    return absl::InvalidArgumentError(StrCat("RegisterWorker: worker '", request.worker_id(),
                                             "' gives no device memory (device.memory_mib)"));
  }
  const std::string who = StrCat("RegisterWorker: worker '", request.worker_id(), "': ");
  struct Text {
    const char* field;
    const std::string& value;
    size_t most;
  };
  const v1::DeviceInfo& device = request.device();
  for (const Text& t :
       {Text{"hostname", request.hostname(), 255}, Text{"version", request.version(), 128},
        Text{"device.kind", device.kind(), 16}, Text{"device.name", device.name(), 256},
        Text{"device.uuid", device.uuid(), 96}}) {
    if (t.value.size() > t.most) {  // UTF-8 the protobuf parser checks already
      return absl::InvalidArgumentError(
          StrCat(who, t.field, " is ", t.value.size(), " bytes; at most ", t.most));
    }
  }
  constexpr int64_t kMostMemoryMib = int64_t{1} << 30;
  if (device.memory_mib() > kMostMemoryMib) {
    return absl::InvalidArgumentError(
        StrCat(who, "device.memory_mib is ", device.memory_mib(), "; at most ", kMostMemoryMib));
  }
  if (device.has_memory_reserve_mib() && device.memory_reserve_mib() < 0) {
    return absl::InvalidArgumentError(
        StrCat(who, "device.memory_reserve_mib must be >= 0, got ", device.memory_reserve_mib()));
  }
  if (device.has_memory_reserve_mib() && device.memory_reserve_mib() > device.memory_mib()) {
    return absl::InvalidArgumentError(
        StrCat(who, "device.memory_reserve_mib (", device.memory_reserve_mib(),
               ") is more than device.memory_mib (", device.memory_mib(), ")"));
  }
  if (device.libtorch_major() < 0 || device.libtorch_major() > 99) {
    return absl::InvalidArgumentError(StrCat(
        who, "device.libtorch_major is ", device.libtorch_major(), "; allowed 0 (not said) to 99"));
  }
  if (request.free_disk_mib() < 0 || request.free_disk_mib() > kMostDiskMib) {
    return absl::InvalidArgumentError(
        StrCat(who, "free_disk_mib is ", request.free_disk_mib(), "; allowed 0 to ", kMostDiskMib));
  }
  const double speed = device.speed_factor();
  if (!(speed == 0 || (speed >= 1e-6 && speed <= 1000))) {
    return absl::InvalidArgumentError(StrCat(
        who, "device.speed_factor must be 0 (measure it) or between 1e-6 and 1000, got ", speed));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* context,
                                               const v1::RegisterWorkerRequest* request,
                                               v1::RegisterWorkerResponse* response) {
  CART_CHECK_CALLER(who, "RegisterWorker");
  if (request->worker_id().empty()) {
    return ToGrpc(absl::InvalidArgumentError("RegisterWorker: worker_id is empty"));
  }
  if (absl::Status bound = CheckWorkerId(who, "RegisterWorker", request->worker_id());
      !bound.ok()) {
    return ToGrpc(bound);
  }
  if (absl::Status bounded = CheckRegistrationBounds(*request); !bounded.ok()) {
    return ToGrpc(bounded);
  }
  // Version skew: a worker of an older protocol than this cartd accepts is refused here, before
  // it takes a run, naming both sides (a release before the number sends 0: protocol 1).
  const int protocol = request->protocol() > 0 ? request->protocol() : 1;
  if (protocol < ctx_.min_worker_protocol) {
    return ToGrpc(absl::FailedPreconditionError(StrCat(
        "RegisterWorker: cart-worker ", request->version().empty() ? "?" : request->version(),
        " speaks worker protocol ", protocol, "; this cartd ", kVersion, " (protocol ",
        kWorkerProtocol, ") accepts protocol ", ctx_.min_worker_protocol,
        " and later (min_worker_protocol): upgrade cart-worker on '", request->hostname(), "'")));
  }
  // A worker token names a box or a cluster's workers, not an unbounded set: 2,000 ids of one
  // token once made /api/v1/workers 87 MB. Ids it registered before may always come back.
  if (ctx_.max_workers_per_token > 0 && who.role == Role::kWorker) {
    int held = 0;
    bool known = false;
    for (const std::string& id : ctx_.scheduler->WorkerIds()) {
      known |= id == request->worker_id();
      held += MayActAs(who, id);
    }
    if (!known && held >= ctx_.max_workers_per_token) {
      return ToGrpc(absl::ResourceExhaustedError(StrCat(
          "RegisterWorker: token '", who.name, "' has registered ", held,
          " worker ids already; at most max_workers_per_token = ", ctx_.max_workers_per_token,
          " (reuse an id, e.g. <host>-gpu<N>, or raise it)")));
    }
  }
  WorkerInfo worker;
  worker.id = request->worker_id();
  worker.hostname = request->hostname();
  worker.version = request->version();
  worker.device_kind = request->device().kind();
  worker.device_name = request->device().name();
  worker.device_index = request->device().index();
  worker.memory_bytes = request->device().memory_mib() * kMiB;
  if (request->device().has_memory_reserve_mib()) {
    worker.memory_reserve_bytes = request->device().memory_reserve_mib() * kMiB;
  }
  worker.free_disk_bytes = request->free_disk_mib() * kMiB;
  worker.uuid = request->device().uuid();
  worker.speed_factor = request->device().speed_factor();
  worker.libtorch_major = request->device().libtorch_major();
  worker.merged_projections = request->device().merged_projections();
  absl::StatusOr<WorkerTiming> timing = ctx_.scheduler->RegisterWorker(worker);
  if (!timing.ok()) return ToGrpc(timing.status());
  response->set_lease_ttl_ms(absl::ToInt64Milliseconds(timing->lease_ttl));
  response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(timing->heartbeat_interval));
  response->set_cartd_version(kVersion);
  response->set_protocol(kWorkerProtocol);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::AcquireJob(grpc::ServerContext* context,
                                           const v1::AcquireJobRequest* request,
                                           v1::AcquireJobResponse* response) {
  CART_CHECK_CALLER(who, "AcquireJob");
  if (absl::Status bound = CheckWorkerId(who, "AcquireJob", request->worker_id()); !bound.ok()) {
    return ToGrpc(bound);
  }
  if (request->wait_ms() < 0) {
    return ToGrpc(absl::InvalidArgumentError("AcquireJob: wait_ms must not be negative"));
  }
  for (const auto& [field, mib] :
       {std::pair<const char*, int64_t>{"free_disk_mib", request->free_disk_mib()},
        {"disk_floor_mib", request->disk_floor_mib()}}) {
    if (mib < 0 || mib > kMostDiskMib) {
      return ToGrpc(absl::InvalidArgumentError(
          StrCat("AcquireJob: ", field, " is ", mib, "; allowed 0 to ", kMostDiskMib)));
    }
  }
  ctx_.scheduler->NoteWorkerDisk(request->worker_id(), request->free_disk_mib() * kMiB,
                                 request->disk_floor_mib() * kMiB);
  // Each long poll holds a server thread: a token holds at most its share of them.
  std::shared_ptr<void> slot;
  if (ctx_.polls != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = ctx_.polls->Take(Caller(who));
    if (!taken.ok()) return ToGrpc(taken.status());
    slot = *std::move(taken);
  }
  // Never wait past the client's own deadline.
  absl::Duration wait = absl::Milliseconds(request->wait_ms());
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    wait = std::min(wait, absl::FromChrono(deadline) - absl::Now() - absl::Milliseconds(50));
  }
  absl::StatusOr<std::optional<Job>> job = ctx_.scheduler->Acquire(request->worker_id(), wait);
  if (!job.ok() && IsDraining(job.status())) {
    response->set_drain(true);  // an answer, not an error: the worker exits
    return grpc::Status::OK;
  }
  if (!job.ok()) return ToGrpc(job.status());
  if (job->has_value()) {
    *response->mutable_job() = ToJob(**job, ctx_.scheduler->timing().lease_ttl);
    if (ctx_.artifacts->options().shared) {
      v1::SharedArtifactStore& shared = *response->mutable_job()->mutable_shared_store();
      shared.set_path(ctx_.artifacts->options().root);
      shared.set_store_id(ctx_.artifacts->store_id());
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::RunJob(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::SchedulerControl, v1::WorkerReport>* stream) {
  CART_CHECK_CALLER(who, "RunJob");
  v1::WorkerReport report;
  if (!stream->Read(&report)) {
    return ToGrpc(absl::InvalidArgumentError("RunJob: the stream ended before its hello"));
  }
  if (!report.has_hello()) {
    return ToGrpc(absl::InvalidArgumentError("RunJob: the first message must be a hello"));
  }
  const int64_t run_id = report.run_id();
  const int64_t attempt = report.attempt();
  if (who.role != Role::kAdmin) {
    // Only the worker the attempt was leased to (by its token) may report on it. An attempt not
    // leased yet is refused too (FAILED_PRECONDITION): otherwise a hello for the next attempt
    // number could race the lease that creates it and attach to another worker's run. An unknown
    // run (NOT_FOUND) is AttachStream's to refuse, with its usual code.
    absl::StatusOr<std::string> leased = ctx_.scheduler->WorkerOfAttempt(run_id, attempt);
    if (!leased.ok() && leased.status().code() != absl::StatusCode::kNotFound) {
      return ToGrpc(leased.status());
    }
    if (leased.ok()) {
      if (absl::Status bound = CheckWorkerId(who, "RunJob", *leased); !bound.ok()) {
        return ToGrpc(bound);
      }
    }
  }
  auto sink = std::make_shared<RunJobStream>(context, stream);
  if (absl::Status attached = ctx_.scheduler->AttachStream(run_id, attempt, sink); !attached.ok()) {
    return ToGrpc(attached);
  }
  // However the loop ends, the scheduler forgets the stream before it dies.
  struct Detach {
    Scheduler* scheduler;
    int64_t run_id;
    RunJobStream* sink;
    ~Detach() {
      sink->End();
      scheduler->DetachStream(run_id, sink);
    }
  } detach{ctx_.scheduler, run_id, sink.get()};

  // What the attempt runs on, as its worker took it at the start (an older worker sends none).
  if (!report.hello().environment().empty()) {
    std::vector<std::pair<std::string, std::string>> items;
    for (const v1::EnvironmentItem& item : report.hello().environment()) {
      items.emplace_back(item.key(), item.value());
    }
    if (absl::Status recorded = ctx_.scheduler->RecordEnvironment(run_id, attempt, items);
        !recorded.ok()) {
      return ToGrpc(recorded);
    }
  }

  AttemptReports reports(ctx_, run_id, attempt, *sink);
  while (stream->Read(&report)) {
    if (std::optional<grpc::Status> end = reports.Handle(report)) return *end;
  }
  // The worker closed the stream or went away; its lease runs on until it lapses.
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::PutArtifact(grpc::ServerContext* context,
                                            grpc::ServerReader<v1::ArtifactChunk>* reader,
                                            v1::PutArtifactResponse* response) {
  CART_CHECK_CALLER(who, "PutArtifact");
  (void)who;  // artifacts are content-addressed: any worker may store one
  v1::ArtifactChunk chunk;
  if (!reader->Read(&chunk)) {
    return ToGrpc(absl::InvalidArgumentError("PutArtifact: no chunk was sent"));
  }
  const std::string sha256 = chunk.sha256();
  const int64_t size = chunk.size_bytes();
  response->set_sha256(sha256);
  response->set_size_bytes(size);
  absl::StatusOr<std::optional<int64_t>> stored = ctx_.artifacts->Size(sha256);
  if (!stored.ok()) return ToGrpc(stored.status());
  if (stored->has_value()) {
    if (**stored != size) {
      return ToGrpc(absl::DataLossError(
          StrCat("PutArtifact: ", sha256, " is stored with ", **stored, " bytes, not ", size)));
    }
    return grpc::Status::OK;  // idempotent: the blob is already here
  }
  absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> upload =
      ctx_.artifacts->BeginUpload(sha256, size);
  if (!upload.ok()) return ToGrpc(upload.status());
  do {
    if (absl::Status appended = (*upload)->Append(chunk.data()); !appended.ok()) {
      return ToGrpc(appended);
    }
  } while (reader->Read(&chunk));
  if (context->IsCancelled()) {
    return ToGrpc(absl::CancelledError(StrCat("PutArtifact: upload of ", sha256, " cancelled")));
  }
  return ToGrpc((*upload)->Commit());
}

grpc::Status WorkerServiceImpl::RecordArtifact(grpc::ServerContext* context,
                                               const v1::RecordArtifactRequest* request,
                                               v1::RecordArtifactResponse* response) {
  CART_CHECK_CALLER(who, "RecordArtifact");
  (void)who;  // content-addressed, as PutArtifact
  (void)response;
  if (request->check_only()) {
    return ToGrpc(ctx_.artifacts->CheckAdopt(request->size_bytes()));
  }
  return ToGrpc(ctx_.artifacts->Adopt(request->sha256(), request->size_bytes()));
}

grpc::Status WorkerServiceImpl::GetArtifact(grpc::ServerContext* context,
                                            const v1::GetArtifactRequest* request,
                                            grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  CART_CHECK_CALLER(who, "GetArtifact");
  // Any worker may fetch a checkpoint to resume another worker's run; a token holds at most its
  // share of downloads at once.
  std::shared_ptr<void> slot;
  if (ctx_.downloads != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = ctx_.downloads->Take(Caller(who));
    if (!taken.ok()) return ToGrpc(taken.status());
    slot = *std::move(taken);
  }
  return StreamArtifact(*ctx_.artifacts, request->sha256(), context, ctx_.send_watch, *writer);
}

}  // namespace cart::server::internal
