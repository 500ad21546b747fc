#pragma once

// Helpers for the in-process gRPC tests: a cartd on 127.0.0.1 port 0 in a temp dir, stubs to it,
// and a fake worker that speaks WorkerService the way cart-worker does.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cart/v1/worker.grpc.pb.h"
#include "common/clock.h"
#include "server/server.h"
#include "tests/support/test_support.h"

namespace cart::server::testing {

constexpr int64_t kMiB = int64_t{1} << 20;

// A one-run sweep of a tiny model.
std::string TinySweep(const std::string& name, int max_attempts = 3);

// Sets the bearer token (when not empty) and a deadline of `seconds`.
void Prepare(grpc::ClientContext& context, const std::string& token, int seconds = 30);

// A fake cart-worker.
class FakeWorker {
 public:
  FakeWorker(std::shared_ptr<grpc::Channel> channel, std::string id, int64_t memory_mib,
             std::string token = "");

  grpc::Status Register();
  // AcquireJob with wait_ms; nullopt (and ok status) when no job came. `drain`, when given, is
  // set to the answer's drain mark.
  grpc::Status Acquire(int64_t wait_ms, std::optional<v1::Job>* job, bool* drain = nullptr);
  // What its next asks say of its disk (AcquireJobRequest free_disk_mib, disk_floor_mib).
  void SetDisk(int64_t free_mib, int64_t floor_mib) {
    free_disk_mib_ = free_mib;
    disk_floor_mib_ = floor_mib;
  }

  // One RunJob stream: opened with a hello for (run, attempt).
  class Stream {
   public:
    Stream(v1::WorkerService::Stub* stub, const std::string& token, int64_t run_id,
           int64_t attempt);
    bool Send(const v1::WorkerReport& report);
    bool Metrics(const std::vector<std::pair<int64_t, double>>& loss_by_step);
    // A checkpoint notice for an uploaded artifact.
    bool Checkpoint(int64_t step, const std::string& sha256, int64_t size);
    // Sends the result, half-closes and returns the final status.
    grpc::Status Finish(v1::JobResult::Outcome outcome);
    bool Read(v1::SchedulerControl* control) { return stream_->Read(control); }
    // Half-closes and returns the final status.
    grpc::Status Finish();
    void Cancel() { context_.TryCancel(); }
    int64_t run_id() const { return run_id_; }
    int64_t attempt() const { return attempt_; }

   private:
    grpc::ClientContext context_;
    std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerReport, v1::SchedulerControl>> stream_;
    int64_t run_id_;
    int64_t attempt_;
  };
  std::unique_ptr<Stream> Open(int64_t run_id, int64_t attempt);

  // PutArtifact of `data` declared as (sha256, size), in 1 MiB chunks.
  grpc::Status Put(const std::string& data, const std::string& sha256, int64_t size,
                   v1::PutArtifactResponse* response = nullptr);
  // GetArtifact into `data`.
  grpc::Status Get(const std::string& sha256, std::string* data);

  v1::WorkerService::Stub* stub() { return stub_.get(); }
  const std::string& id() const { return id_; }

 private:
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::string id_;
  int64_t memory_mib_;
  std::string token_;
  int64_t free_disk_mib_ = 0;
  int64_t disk_floor_mib_ = 0;
};

// A cartd started in-process with RunServer on 127.0.0.1:0.
class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Adjusts the config before the server starts (called by SetUp).
  virtual void Configure(ServerConfig& config) {}

  std::shared_ptr<grpc::Channel> Channel();
  // Submits a sweep as the user; returns its run ids.
  std::vector<int64_t> Submit(const std::string& yaml);
  v1::RunView GetRun(int64_t run_id);
  // GetRun's whole answer: the run, its events and its checkpoints.
  v1::GetRunResponse GetRunResponse(int64_t run_id);

  ::cart::testing::TempDir dir_;
  FakeClock clock_;  // the server's clock: leases move only when a test advances it
  ServerConfig config_;
  std::unique_ptr<ServerHandle> server_;
  std::unique_ptr<v1::SchedulerService::Stub> scheduler_;
  std::string user_token_;    // sent on SchedulerService calls by the helpers
  std::string worker_token_;  // given to FakeWorkers made by MakeWorker
  std::unique_ptr<FakeWorker> MakeWorker(const std::string& id, int64_t memory_mib = 24 * 1024);
};

}  // namespace cart::server::testing
