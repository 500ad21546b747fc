#include "tests/server/server_fixture.h"

#include <chrono>

#include "common/strings.h"

namespace cart::server::testing {

std::string TinySweep(const std::string& name, int max_attempts) {
  return StrCat("name: ", name, "\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\n",
                "max_attempts: ", max_attempts, "\n");
}

void Prepare(grpc::ClientContext& context, const std::string& token, int seconds) {
  if (!token.empty()) context.AddMetadata("authorization", StrCat("Bearer ", token));
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

FakeWorker::FakeWorker(std::shared_ptr<grpc::Channel> channel, std::string id, int64_t memory_mib,
                       std::string token)
    : stub_(v1::WorkerService::NewStub(channel)),
      id_(std::move(id)),
      memory_mib_(memory_mib),
      token_(std::move(token)) {}

grpc::Status FakeWorker::Register() {
  grpc::ClientContext context;
  Prepare(context, token_);
  v1::RegisterWorkerRequest request;
  request.set_worker_id(id_);
  request.set_hostname("testbox");
  request.set_version("test");
  request.mutable_device()->set_kind("cuda");
  request.mutable_device()->set_name("Fake GPU");
  request.mutable_device()->set_memory_mib(memory_mib_);
  v1::RegisterWorkerResponse response;
  return stub_->RegisterWorker(&context, request, &response);
}

grpc::Status FakeWorker::Acquire(int64_t wait_ms, std::optional<v1::Job>* job, bool* drain) {
  grpc::ClientContext context;
  Prepare(context, token_, static_cast<int>(wait_ms / 1000) + 30);
  v1::AcquireJobRequest request;
  request.set_worker_id(id_);
  request.set_wait_ms(wait_ms);
  request.set_free_disk_mib(free_disk_mib_);
  request.set_disk_floor_mib(disk_floor_mib_);
  v1::AcquireJobResponse response;
  grpc::Status status = stub_->AcquireJob(&context, request, &response);
  job->reset();
  if (status.ok() && response.has_job()) *job = response.job();
  if (drain != nullptr) *drain = response.drain();
  return status;
}

FakeWorker::Stream::Stream(v1::WorkerService::Stub* stub, const std::string& token, int64_t run_id,
                           int64_t attempt)
    : run_id_(run_id), attempt_(attempt) {
  Prepare(context_, token, 60);
  stream_ = stub->RunJob(&context_);
  v1::WorkerReport hello;
  hello.mutable_hello();
  Send(hello);
}

bool FakeWorker::Stream::Send(const v1::WorkerReport& report) {
  v1::WorkerReport copy = report;
  copy.set_run_id(run_id_);
  copy.set_attempt(attempt_);
  return stream_->Write(copy);
}

bool FakeWorker::Stream::Metrics(const std::vector<std::pair<int64_t, double>>& loss_by_step) {
  v1::WorkerReport report;
  for (const auto& [step, loss] : loss_by_step) {
    v1::MetricPoint* point = report.mutable_metrics()->add_points();
    point->set_step(step);
    point->set_name("loss");
    point->set_value(loss);
    point->set_wall_time_us(1'700'000'000'000'000 + step);
  }
  return Send(report);
}

bool FakeWorker::Stream::Checkpoint(int64_t step, const std::string& sha256, int64_t size) {
  v1::WorkerReport notice;
  v1::CheckpointRef* ref = notice.mutable_checkpoint()->mutable_checkpoint();
  ref->set_step(step);
  ref->set_sha256(sha256);
  ref->set_size_bytes(size);
  return Send(notice);
}

grpc::Status FakeWorker::Stream::Finish(v1::JobResult::Outcome outcome) {
  v1::WorkerReport result;
  result.mutable_result()->set_outcome(outcome);
  if (!Send(result)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "result not sent");
  return Finish();
}

grpc::Status FakeWorker::Stream::Finish() {
  stream_->WritesDone();
  return stream_->Finish();
}

std::unique_ptr<FakeWorker::Stream> FakeWorker::Open(int64_t run_id, int64_t attempt) {
  return std::make_unique<Stream>(stub_.get(), token_, run_id, attempt);
}

grpc::Status FakeWorker::Put(const std::string& data, const std::string& sha256, int64_t size,
                             v1::PutArtifactResponse* response) {
  grpc::ClientContext context;
  Prepare(context, token_);
  v1::PutArtifactResponse local;
  auto writer = stub_->PutArtifact(&context, response ? response : &local);
  size_t offset = 0;
  bool first = true;
  do {
    v1::ArtifactChunk chunk;
    if (first) {
      chunk.set_sha256(sha256);
      chunk.set_size_bytes(size);
      first = false;
    }
    const size_t n = std::min<size_t>(kMiB, data.size() - offset);
    chunk.set_data(data.substr(offset, n));
    offset += n;
    if (!writer->Write(chunk)) break;  // the server answered early (idempotent, or an error)
  } while (offset < data.size());
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status FakeWorker::Get(const std::string& sha256, std::string* data) {
  grpc::ClientContext context;
  Prepare(context, token_);
  v1::GetArtifactRequest request;
  request.set_sha256(sha256);
  auto reader = stub_->GetArtifact(&context, request);
  data->clear();
  v1::ArtifactChunk chunk;
  while (reader->Read(&chunk)) data->append(chunk.data());
  return reader->Finish();
}

void ServerFixture::SetUp() {
  config_.listen = "127.0.0.1:0";
  config_.data_dir = dir_.File("data");
  config_.max_acquire_wait = absl::Seconds(10);
  config_.shutdown_grace = absl::Seconds(2);
  config_.clock = &clock_;
  config_.raise_micro_batch = false;  // the fake workers say "cuda"; a test turns it on to test it
  Configure(config_);
  auto server = RunServer(config_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  scheduler_ = v1::SchedulerService::NewStub(Channel());
}

void ServerFixture::TearDown() {
  if (server_) server_->Shutdown();
}

std::shared_ptr<grpc::Channel> ServerFixture::Channel() {
  return grpc::CreateChannel(server_->dial_address(), grpc::InsecureChannelCredentials());
}

std::unique_ptr<FakeWorker> ServerFixture::MakeWorker(const std::string& id, int64_t memory_mib) {
  return std::make_unique<FakeWorker>(Channel(), id, memory_mib, worker_token_);
}

std::vector<int64_t> ServerFixture::Submit(const std::string& yaml) {
  grpc::ClientContext context;
  Prepare(context, user_token_);
  v1::SubmitSweepRequest request;
  request.set_spec_yaml(yaml);
  request.set_file_name("test.yaml");
  request.set_request_id(StrCat("req-", yaml.size(), "-", yaml.substr(6, 12)));
  v1::SubmitSweepResponse response;
  grpc::Status status = scheduler_->SubmitSweep(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<int64_t> ids;
  for (const v1::RunView& run : response.runs()) ids.push_back(run.run_id());
  return ids;
}

v1::RunView ServerFixture::GetRun(int64_t run_id) { return GetRunResponse(run_id).run(); }

v1::GetRunResponse ServerFixture::GetRunResponse(int64_t run_id) {
  grpc::ClientContext context;
  Prepare(context, user_token_);
  v1::GetRunRequest request;
  request.set_run_id(run_id);
  v1::GetRunResponse response;
  grpc::Status status = scheduler_->GetRun(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

}  // namespace cart::server::testing
