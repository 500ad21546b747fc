// worker::DeviceWatch, the device heartbeat, against a fake cartd: a real gRPC server on loopback
// whose ReportDevice refuses the first calls (cartd unreachable) and then takes them. Nothing is
// lost or sent twice across the refusals, and readings keep coming while no job runs.

#include "worker/device_watch.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::worker {
namespace {

using ::cart::testing::WaitUntil;

class FakeCartd final : public cart::v1::WorkerService::Service {
 public:
  // Refuses the first `refuse_first` calls as UNAVAILABLE (cartd away), or as INVALID_ARGUMENT.
  explicit FakeCartd(int refuse_first, bool invalid = false)
      : refuse_(refuse_first), invalid_(invalid) {}
  grpc::Status ReportDevice(grpc::ServerContext*, const cart::v1::DeviceReport* request,
                            cart::v1::DeviceReportResponse*) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (refuse_ > 0) {
      --refuse_;
      return invalid_ ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "samples[0]: bad")
                      : grpc::Status(grpc::StatusCode::UNAVAILABLE, "cartd is restarting");
    }
    worker_ = request->worker_id();
    uuid_ = request->device().uuid();
    for (const auto& s : request->samples()) stamps_.push_back(s.wall_time_us());
    return grpc::Status::OK;
  }
  std::vector<int64_t> stamps() {
    absl::MutexLock lock(&mu_);
    return stamps_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::string worker() {
    absl::MutexLock lock(&mu_);
    return worker_ + " " + uuid_;
  }

 private:
  absl::Mutex mu_;
  int refuse_ ABSL_GUARDED_BY(mu_);
  const bool invalid_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::string worker_ ABSL_GUARDED_BY(mu_);
  std::string uuid_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> stamps_ ABSL_GUARDED_BY(mu_);
};

// The fake cartd on a loopback port, and a stub to it; shut down when it goes.
struct Served {
  explicit Served(FakeCartd& cartd) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&cartd);
    server = builder.BuildAndStart();
    stub = cart::v1::WorkerService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  ~Served() {
    if (server) server->Shutdown();
  }
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<cart::v1::WorkerService::Stub> stub;
};

TEST(DeviceWatchTest, ReadingsRefusedWhileCartdIsDownArriveOnceInOrderAfterwards) {
  FakeCartd cartd(/*refuse_first=*/3);
  Served served(cartd);
  ASSERT_NE(served.server, nullptr);
  cart::v1::WorkerService::Stub* stub = served.stub.get();
  int64_t next = 0;
  {
    cart::v1::DeviceInfo device;
    device.set_kind("cuda");
    device.set_uuid("GPU-1234");
    DeviceWatch watch({}, stub, "box-gpu0", device, /*interval_ms=*/100, [&next] {
      cart::v1::DeviceSample s;
      s.set_wall_time_us(++next);
      s.set_utilization(0.5);
      return s;
    });
    watch.Start();
    // delivered() counts once the answer is back, a moment after cartd stored the readings.
    ASSERT_TRUE(WaitUntil([&] { return watch.delivered() >= 8; }, absl::Seconds(20)));
    EXPECT_GE(cartd.calls(), 3 + 1);  // three refused, then at least one taken with the backlog
    EXPECT_GE(cartd.stamps().size(), 8u);
  }
  const std::vector<int64_t> stamps = cartd.stamps();
  for (size_t i = 0; i < stamps.size(); ++i) {
    EXPECT_EQ(stamps[i], static_cast<int64_t>(i) + 1) << "reading " << i;
  }
  EXPECT_EQ(cartd.worker(), "box-gpu0 GPU-1234");
}

// A batch cartd refuses as invalid would be refused again: it is dropped, and the readings after
// it arrive (kept, it would hold up an hour of them).
TEST(DeviceWatchTest, ABatchRefusedAsInvalidIsDroppedNotResentForEver) {
  FakeCartd cartd(/*refuse_first=*/1, /*invalid=*/true);
  Served served(cartd);
  ASSERT_NE(served.server, nullptr);
  cart::v1::WorkerService::Stub* stub = served.stub.get();
  int64_t next = 0;
  DeviceWatch watch({}, stub, "box-gpu0", {}, /*interval_ms=*/100, [&next] {
    cart::v1::DeviceSample s;
    s.set_wall_time_us(++next);
    return s;
  });
  watch.Start();
  ASSERT_TRUE(WaitUntil([&] { return watch.delivered() >= 3; }, absl::Seconds(20)));
  EXPECT_EQ(watch.dropped(), 1);
  EXPECT_EQ(cartd.stamps().front(), 2);  // reading 1 was in the refused batch
}

}  // namespace
}  // namespace cart::worker
