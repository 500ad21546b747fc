// The cartd binary as a process: flags, a config file, SIGTERM with exit status 0, a database left
// intact with its leases, and a restart that lets the worker carry on.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "common/process.h"
#include "common/strings.h"
#include "store/run_store.h"
#include "tests/server/server_fixture.h"

namespace cart::server::testing {
namespace {

using ::cart::testing::BinDir;
using ::cart::testing::FreePort;
using ::cart::testing::ReadFile;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;

// Starts `cartd args...` with its output to `log`; returns the pid.
pid_t StartCartd(const std::vector<std::string>& args, const std::string& log) {
  SpawnOptions options;
  options.output_path = log;
  options.die_with_parent = true;
  absl::StatusOr<pid_t> pid = Spawn(BinDir() + "/cartd", args, options);
  EXPECT_TRUE(pid.ok()) << pid.status();
  return pid.ok() ? *pid : -1;
}

// Waits for the process to exit; its exit status, or -1 on timeout (the process is then killed).
int WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::shared_ptr<grpc::Channel> Connect(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return channel;
}

class CartdProcessTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(CartdProcessTest, SigtermStopsGracefullyAndARestartKeepsTheLease) {
  const std::string address = StrCat("127.0.0.1:", FreePort());
  const std::string data = dir_.File("data");
  // The config file gives the data dir and a lease TTL; the flag overrides the TTL.
  WriteFile(dir_.File("cartd.yaml"), StrCat("data_dir: ", data, "\nlease_ttl: 999\n"));
  const std::vector<std::string> args = {
      "--config", dir_.File("cartd.yaml"), "--listen", address, "--lease-ttl", "30", "--http",
      "off"};
  pid_t pid = StartCartd(args, dir_.File("cartd1.log"));
  ASSERT_GT(pid, 0);
  auto channel = Connect(address);
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY) << ReadFile(dir_.File("cartd1.log"));

  auto scheduler = v1::SchedulerService::NewStub(channel);
  {
    grpc::ClientContext context;
    Prepare(context, "");
    v1::SubmitSweepRequest request;
    request.set_spec_yaml(TinySweep("proc"));
    request.set_request_id("proc-1");
    v1::SubmitSweepResponse response;
    ASSERT_TRUE(scheduler->SubmitSweep(&context, request, &response).ok());
  }
  FakeWorker worker(channel, "w1", 24 * 1024);
  ASSERT_TRUE(worker.Register().ok());
  std::optional<v1::Job> job;
  ASSERT_TRUE(worker.Acquire(0, &job).ok());
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->lease_ttl_ms(), 30'000);  // the flag won over the file
  {
    auto stream = worker.Open(job->run_id(), job->attempt());
    ASSERT_TRUE(stream->Metrics({{0, 5.0}, {1, 4.0}}));
    v1::SchedulerControl ack;
    ASSERT_TRUE(stream->Read(&ack));
    EXPECT_EQ(ack.ack().acked_step(), 1);
    // SIGTERM with the stream open: cartd closes it and exits 0.
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(WaitExit(pid, absl::Seconds(15)), 0) << ReadFile(dir_.File("cartd1.log"));
    stream->Finish();
  }
  EXPECT_THAT(ReadFile(dir_.File("cartd1.log")), ::testing::HasSubstr("SIGTERM received"));

  // The database is intact, with the run still leased and its metrics stored.
  CART_ASSERT_OK_AND_ASSIGN(store::IntegrityReport report,
                            store::CheckDatabase(StrCat(data, "/cart.db")));
  EXPECT_TRUE(report.ok) << StrJoin(report.problems, "; ");
  {
    store::StoreOptions options;
    options.path = StrCat(data, "/cart.db");
    CART_ASSERT_OK_AND_ASSIGN(auto store, store::RunStore::Open(options));
    CART_ASSERT_OK_AND_ASSIGN(store::RunRecord run, store->GetRun(job->run_id()));
    EXPECT_EQ(run.state, store::RunState::kRunning);
    CART_ASSERT_OK_AND_ASSIGN(auto summaries, store->RunSummaries(job->run_id()));
    ASSERT_EQ(summaries.size(), 1u);
    EXPECT_EQ(summaries[0].latest_step, 1);
  }

  // A restarted cartd lets the worker reconnect under the same attempt.
  pid = StartCartd(args, dir_.File("cartd2.log"));
  channel = Connect(address);
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY) << ReadFile(dir_.File("cartd2.log"));
  FakeWorker again(channel, "w1", 24 * 1024);
  auto stream = again.Open(job->run_id(), job->attempt());
  ASSERT_TRUE(stream->Metrics({{2, 3.0}}));
  v1::SchedulerControl ack;
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_EQ(ack.ack().acked_step(), 2);
  EXPECT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());
  ASSERT_EQ(kill(pid, SIGINT), 0);
  EXPECT_EQ(WaitExit(pid, absl::Seconds(15)), 0) << ReadFile(dir_.File("cartd2.log"));
}

TEST_F(CartdProcessTest, RefusesAPublicAddressWithoutTlsAndTokens) {
  pid_t pid =
      StartCartd({"--listen", StrCat("0.0.0.0:", FreePort()), "--data-dir", dir_.File("data")},
                 dir_.File("cartd.log"));
  EXPECT_EQ(WaitExit(pid, absl::Seconds(15)), 1);
  EXPECT_THAT(ReadFile(dir_.File("cartd.log")), ::testing::HasSubstr("refusing to listen"));
}

TEST_F(CartdProcessTest, VersionAndHelp) {
  pid_t pid = StartCartd({"--version"}, dir_.File("v.log"));
  EXPECT_EQ(WaitExit(pid, absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace cart::server::testing
