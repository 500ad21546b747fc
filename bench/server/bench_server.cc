// bench-server: cartd's figures, printed, not asserted.
//   1. AcquireJob round trip, p50 / p99, with 32 concurrent fake workers (in-process cartd).
//   2. Sustained metric ingest over gRPC from 64 RunJob streams, with a final count check.
//   3. RSS of a real cartd process (build/bin/cartd) holding 10,000 queued runs.
// 1 and 2 run twice: alone, and with 20 dashboard clients (--dashboard-clients) following live
// server-sent event streams on cartd's HTTP port (sweep-level for 1, one running run each for 2),
// so the two lines side by side show what the dashboard costs the gRPC side.
//
// Usage: bench-server [--acquires-per-worker N] [--ingest-seconds S] [--runs N]
//                     [--dashboard-clients N] [--only acquire|ingest|rss] [--sync full|normal]

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cart/v1/worker.grpc.pb.h"
#include "common/process.h"
#include "common/strings.h"
#include "server/server.h"
#include "store/run_store.h"

namespace {

using cart::StrCat;
namespace v1 = cart::v1;

std::string SweepWithSeeds(const std::string& name, int runs) {
  std::vector<int> seeds;
  for (int i = 0; i < runs; ++i) seeds.push_back(i + 1);
  return StrCat("name: ", name, "\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 1000}\n",
                "seeds: [", cart::StrJoin(seeds, ", "), "]\nmax_runs: ", runs, "\n");
}

grpc::Status Submit(v1::SchedulerService::Stub& stub, const std::string& yaml) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  v1::SubmitSweepRequest request;
  request.set_spec_yaml(yaml);
  request.set_request_id(StrCat("bench-", yaml.size(), "-", getpid(), "-", rand()));
  v1::SubmitSweepResponse response;
  return stub.SubmitSweep(&context, request, &response);
}

grpc::Status Register(v1::WorkerService::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  v1::RegisterWorkerRequest request;
  request.set_worker_id(id);
  request.mutable_device()->set_kind("cuda");
  request.mutable_device()->set_memory_mib(24 * 1024);
  v1::RegisterWorkerResponse response;
  return stub.RegisterWorker(&context, request, &response);
}

std::optional<v1::Job> Acquire(v1::WorkerService::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  v1::AcquireJobRequest request;
  request.set_worker_id(id);
  request.set_wait_ms(0);
  v1::AcquireJobResponse response;
  if (!stub.AcquireJob(&context, request, &response).ok() || !response.has_job()) {
    return std::nullopt;
  }
  return response.job();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// cartd's store_sync for the in-process cartd (--sync full|normal; cartd's default: full).
std::string g_sync = "full";

std::unique_ptr<cart::server::ServerHandle> StartInProcess(const std::string& dir) {
  cart::server::ServerConfig config;
  config.store_sync = g_sync;
  config.listen = "127.0.0.1:0";
  config.http_listen = "127.0.0.1:0";
  config.data_dir = dir;
  auto server = cart::server::RunServer(config);
  if (!server.ok()) {
    std::fprintf(stderr, "bench-server: %s\n", std::string(server.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*server);
}

// Dashboard clients: each holds one HTTP connection to an event stream of cartd's dashboard port
// and reads everything it sends until stopped, as a browser tab would.
class DashboardCrowd {
 public:
  DashboardCrowd(int port, const std::vector<std::string>& paths) {
    for (const std::string& path : paths) {
      threads_.emplace_back([this, port, path] {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
          close(fd);
          return;
        }
        timeval tv{0, 200'000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        const std::string request = StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        if (write(fd, request.data(), request.size()) < 0) {
          close(fd);
          return;
        }
        char buffer[65536];
        while (!stop_.load()) {
          const ssize_t n = read(fd, buffer, sizeof(buffer));
          if (n == 0) break;
          if (n > 0) bytes_ += n;
        }
        close(fd);
      });
    }
  }
  ~DashboardCrowd() { Stop(); }
  // Stops the clients; the bytes they received.
  int64_t Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    return bytes_.load();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> bytes_{0};
  std::vector<std::thread> threads_;
};

std::string CrowdLabel(int clients) {
  return clients == 0 ? std::string("no dashboard clients")
                      : StrCat(clients, " dashboard clients following live streams");
}

void BenchAcquire(const std::string& dir, int workers, int per_worker, int clients) {
  auto server = StartInProcess(dir);
  auto channel = grpc::CreateChannel(server->dial_address(), grpc::InsecureChannelCredentials());
  auto scheduler = v1::SchedulerService::NewStub(channel);
  if (!Submit(*scheduler, SweepWithSeeds("acquire", workers * per_worker)).ok()) std::exit(1);
  DashboardCrowd crowd(server->http_port(),
                       std::vector<std::string>(clients, "/api/v1/sweeps/acquire/live"));
  std::vector<std::vector<double>> latencies(workers);
  std::vector<std::thread> threads;
  std::atomic<int> empty{0};
  const auto start = std::chrono::steady_clock::now();
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      // Each worker has its own channel, as separate processes would.
      auto own = grpc::CreateChannel(server->dial_address(), grpc::InsecureChannelCredentials());
      auto stub = v1::WorkerService::NewStub(own);
      const std::string id = StrCat("bench-w", w);
      Register(*stub, id);
      for (int i = 0; i < per_worker; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        std::optional<v1::Job> job = Acquire(*stub, id);
        const auto t1 = std::chrono::steady_clock::now();
        if (!job) ++empty;
        latencies[w].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  const int64_t crowd_bytes = crowd.Stop();
  std::printf(
      "AcquireJob round trip, %d concurrent workers, %zu acquisitions (%d empty), %s: "
      "p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.0f acquisitions/s (dashboard read %lld bytes)\n",
      workers, all.size(), empty.load(), CrowdLabel(clients).c_str(), Percentile(all, 0.5),
      Percentile(all, 0.99), Percentile(all, 1.0), all.size() / seconds,
      static_cast<long long>(crowd_bytes));
  server->Shutdown();
}

void BenchIngest(const std::string& dir, int streams, double duration_s, int steps_per_batch,
                 int names, int clients) {
  auto server = StartInProcess(dir);
  auto channel = grpc::CreateChannel(server->dial_address(), grpc::InsecureChannelCredentials());
  auto scheduler = v1::SchedulerService::NewStub(channel);
  if (!Submit(*scheduler, SweepWithSeeds("ingest", streams)).ok()) std::exit(1);
  // Client i follows run i % streams + 1 (the sweep's runs have ids 1..streams).
  std::vector<std::string> paths;
  for (int i = 0; i < clients; ++i)
    paths.push_back(StrCat("/api/v1/runs/", i % streams + 1, "/live"));
  DashboardCrowd crowd(server->http_port(), paths);
  std::vector<int64_t> sent(streams, 0);
  std::vector<int64_t> run_ids(streams, 0);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  const auto start = std::chrono::steady_clock::now();
  const auto stop = start + std::chrono::duration<double>(duration_s);
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      auto own = grpc::CreateChannel(server->dial_address(), grpc::InsecureChannelCredentials());
      auto stub = v1::WorkerService::NewStub(own);
      const std::string id = StrCat("ingest-w", s);
      Register(*stub, id);
      std::optional<v1::Job> job = Acquire(*stub, id);
      if (!job) {
        ++errors;
        return;
      }
      run_ids[s] = job->run_id();
      grpc::ClientContext context;
      auto stream = stub->RunJob(&context);
      v1::WorkerReport report;
      report.set_run_id(job->run_id());
      report.set_attempt(job->attempt());
      report.mutable_hello();
      stream->Write(report);
      int64_t step = 0;
      while (std::chrono::steady_clock::now() < stop) {
        report.clear_body();
        auto* batch = report.mutable_metrics();
        for (int k = 0; k < steps_per_batch; ++k, ++step) {
          for (int n = 0; n < names; ++n) {
            v1::MetricPoint* p = batch->add_points();
            p->set_step(step);
            p->set_name(StrCat("m", n));
            p->set_value(static_cast<double>(step) * 0.001 + n);
            p->set_wall_time_us(step);
          }
        }
        if (!stream->Write(report)) {
          ++errors;
          break;
        }
        v1::SchedulerControl ack;
        if (!stream->Read(&ack) || !ack.has_ack() || ack.ack().acked_step() != step - 1) {
          ++errors;
          break;
        }
        sent[s] += static_cast<int64_t>(steps_per_batch) * names;
      }
      stream->WritesDone();
      stream->Finish();
    });
  }
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t crowd_bytes = crowd.Stop();
  int64_t total_sent = 0;
  for (int64_t n : sent) total_sent += n;
  // Count what the database holds, metric by metric.
  int64_t stored = 0;
  for (int s = 0; s < streams; ++s) {
    for (int n = 0; n < names; ++n) {
      cart::store::SeriesRequest request;
      request.run_id = run_ids[s];
      request.metric = StrCat("m", n);
      request.max_points = 1;
      auto series = server->store().MetricSeries(request);
      if (series.ok()) stored += series->total_points;
    }
  }
  std::printf(
      "Metric ingest over gRPC, %d streams, batches of %d points (%d steps x %d names), "
      "acked one at a time, %s, %.1f s: %lld points acked, %lld stored (%s), %.0f points/s, "
      "%d stream errors (dashboard read %lld bytes)\n",
      streams, steps_per_batch * names, steps_per_batch, names, CrowdLabel(clients).c_str(),
      seconds, static_cast<long long>(total_sent), static_cast<long long>(stored),
      stored == total_sent ? "nothing lost" : "MISMATCH", total_sent / seconds, errors.load(),
      static_cast<long long>(crowd_bytes));
  server->Shutdown();
}

// A field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM").
int64_t StatusKib(pid_t pid, const std::string& field) {
  std::ifstream status(StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1);
  }
  return -1;
}

int64_t VmRssKib(pid_t pid) { return StatusKib(pid, "VmRSS"); }

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

void BenchRss(const std::string& dir, int runs) {
  const std::string cartd =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cartd").string();
  const std::string address = StrCat("127.0.0.1:", FreePort());
  cart::SpawnOptions quiet;
  quiet.output_path = "/dev/null";
  quiet.die_with_parent = true;
  absl::StatusOr<pid_t> started = Spawn(cartd, {"--listen", address, "--data-dir", dir}, quiet);
  if (!started.ok()) {
    std::fprintf(stderr, "bench-server: %s\n", std::string(started.status().message()).c_str());
    return;
  }
  const pid_t pid = *started;
  // 10,000 RunViews (every config key of every run) are about 6 MB: above gRPC's default 4 MiB.
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20))) {
    std::fprintf(stderr, "bench-server: %s did not start\n", cartd.c_str());
    kill(pid, SIGKILL);
    return;
  }
  auto scheduler = v1::SchedulerService::NewStub(channel);
  const int64_t idle = VmRssKib(pid);
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status submitted = Submit(*scheduler, SweepWithSeeds("rss", runs));
  const double submit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t after_submit = VmRssKib(pid);
  grpc::ClientContext context;
  v1::ListRunsRequest list;
  v1::ListRunsResponse listed;
  const auto t1 = std::chrono::steady_clock::now();
  grpc::Status list_status = scheduler->ListRuns(&context, list, &listed);
  const double list_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const int64_t after_list = VmRssKib(pid);
  std::printf(
      "cartd process RSS (VmRSS of pid %d): %lld KiB idle, %lld KiB after submitting %d "
      "runs (%s, %.2f s), %lld KiB after ListRuns of %d runs (%.2f s)\n",
      pid, static_cast<long long>(idle), static_cast<long long>(after_submit), runs,
      submitted.ok() ? "ok" : submitted.error_message().c_str(), submit_s,
      static_cast<long long>(after_list), listed.runs_size(), list_s);
  std::printf("  peak (VmHWM) %lld KiB\n", static_cast<long long>(StatusKib(pid, "VmHWM")));
  // The pages a screen reads: 20 of each, p50 / p99.
  auto time_call = [&](const std::function<grpc::Status()>& call) {
    std::vector<double> ms;
    for (int i = 0; i < 20; ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (!call().ok()) return std::make_pair(-1.0, -1.0);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    return std::make_pair(Percentile(ms, 0.5), Percentile(ms, 0.99));
  };
  const auto page = time_call([&] {
    grpc::ClientContext ctx;
    v1::ListRunsRequest req;
    req.set_sweep("rss");
    req.set_limit(100);
    req.set_offset(runs / 2);
    v1::ListRunsResponse resp;
    return scheduler->ListRuns(&ctx, req, &resp);
  });
  const auto sweep = time_call([&] {
    grpc::ClientContext ctx;
    v1::GetSweepRequest req;
    req.set_name("rss");
    req.set_run_limit(100);
    v1::GetSweepResponse resp;
    return scheduler->GetSweep(&ctx, req, &resp);
  });
  for (int i = 0; i < 99; ++i) {
    grpc::ClientContext ctx;
    Submit(*scheduler, SweepWithSeeds(StrCat("small-", i), 2));
  }
  const auto sweeps = time_call([&] {
    grpc::ClientContext ctx;
    v1::ListSweepsResponse resp;
    return scheduler->ListSweeps(&ctx, v1::ListSweepsRequest{}, &resp);
  });
  std::printf(
      "  with %d runs: ListRuns page of 100 (offset %d) p50 %.1f ms, p99 %.1f ms; GetSweep with "
      "100 runs p50 %.1f ms, p99 %.1f ms; ListSweeps of 100 sweeps p50 %.1f ms, p99 %.1f ms\n",
      runs, runs / 2, page.first, page.second, sweep.first, sweep.second, sweeps.first,
      sweeps.second);
  if (!list_status.ok())
    std::printf("  ListRuns failed: %s\n", list_status.error_message().c_str());
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

int main(int argc, char** argv) {
  int per_worker = 200;
  double ingest_seconds = 10;
  int runs = 10'000;
  int clients = 20;
  std::string only;  // acquire, ingest or rss; empty: all three
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--acquires-per-worker")) per_worker = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ingest-seconds")) ingest_seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    if (!std::strcmp(argv[i], "--dashboard-clients")) clients = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--sync")) g_sync = argv[i + 1];
  }
  if (g_sync != "full" && g_sync != "normal") {
    std::fprintf(stderr, "bench-server: --sync must be full or normal, not '%s'\n", g_sync.c_str());
    return 2;
  }
  const std::string root =
      (std::filesystem::temp_directory_path() / StrCat("bench-server-", getpid())).string();
  std::filesystem::create_directories(root);
  for (int crowd : {0, clients}) {
    if (only.empty() || only == "acquire") {
      BenchAcquire(StrCat(root, "/acquire", crowd), 32, per_worker, crowd);
    }
  }
  for (int crowd : {0, clients}) {
    if (only.empty() || only == "ingest") {
      BenchIngest(StrCat(root, "/ingest", crowd), 64, ingest_seconds, /*steps_per_batch=*/10,
                  /*names=*/20, crowd);
    }
  }
  if (only.empty() || only == "rss") BenchRss(root + "/rss", runs);
  std::filesystem::remove_all(root);
  return 0;
}
