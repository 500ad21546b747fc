// cart up — the one-box setup: an embedded cartd on a local SQLite file, N local cart-worker
// processes, and optionally a sweep run to completion with its results table printed at the end.

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/commands.h"
#include "cli/lineage.h"
#include "cli/local_workers.h"
#include "cli/report_command.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/nvidia.h"
#include "common/process.h"
#include "common/status.h"
#include "common/strings.h"
#include "rpc/client.h"
#include "server/server.h"

namespace cart::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted = true; }

struct UpArgs {
  std::string data_dir = "var/cart";
  std::string listen = "127.0.0.1:7070";
  std::string http = "127.0.0.1:8080";
  bool http_given = false;  // --http was on the command line: no fallback to a free port
  int workers = 2;          // CPU workers, where they train on the CPU
  std::string device = "auto";
  int threads = 1;
  std::vector<std::string> sweeps;  // submitted in order; the tables read the first
  std::string table_rows = "d", table_cols = "R";
  std::vector<std::string> table_metrics = {"rho_max"};
  std::string report_dir;                  // write `cart report` here at the end
  std::vector<std::string> report_sweeps;  // ROLE=SWEEP overrides for the report
  std::string client_config = rpc::DefaultConfigPath();
  std::vector<int64_t> worker_memory_mib;
  double lease_ttl_s = 20;
};

// Starts a worker with this process's environment plus OPENBLAS_NUM_THREADS = `threads` (unless
// the user set it): OpenBLAS otherwise starts one thread per core in every worker, on top of
// LibTorch's own threads. Measured on this 2-core machine, two workers training at once (CART d
// 128, R 4, T 128, batch 8, one LibTorch thread each): 1,930 tokens/s each with OpenBLAS's
// default, 3,945 with one OpenBLAS thread. The worker token goes in its environment (CART_TOKEN),
// never on its command line, where `ps` would show it to every user of the box.
absl::StatusOr<pid_t> SpawnWorker(const std::string& exe, const std::vector<std::string>& args,
                                  int threads, const std::string& token) {
  SpawnOptions options;
  options.env.push_back(StrCat("CART_TOKEN=", token));
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    options.env.push_back(StrCat("OPENBLAS_NUM_THREADS=", threads));
  }
  return Spawn(exe, args, options);
}

// Waits until no run of the sweeps can still make progress: none is QUEUED, LEASED or RUNNING
// (a BLOCKED run left then waits for a parent that finished without its checkpoint). Prints one
// progress line every 10 s. Returns early, OK, on Ctrl-C.
template <typename Call>
absl::Status WaitForSweeps(const std::vector<std::string>& names, Call& call) {
  auto last_print = std::chrono::steady_clock::now() - std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  while (!g_interrupted) {
    bool active = false;
    int64_t done = 0, total = 0;
    std::vector<std::string> per_sweep, running;
    for (const std::string& name : names) {
      // The counts by state cover every run; only the running ones are listed (one answer holds
      // at most 1,000 runs, and a line names a handful).
      cart::v1::GetSweepRequest g;
      g.set_name(name);
      g.set_run_limit(1);
      cart::v1::GetSweepResponse s;
      CART_RETURN_IF_ERROR(call(&cart::v1::SchedulerService::Stub::GetSweep, g, s));
      auto count = [&](const char* state) {
        auto it = s.sweep().runs_by_state().find(state);
        return it == s.sweep().runs_by_state().end() ? int64_t{0} : it->second;
      };
      const int64_t finished = count("SUCCEEDED");
      const int64_t running_here = count("RUNNING");
      if (running_here + count("QUEUED") + count("LEASED") > 0) active = true;
      if (running_here > 0) {
        cart::v1::ListRunsRequest l;
        l.set_sweep(name);
        l.add_states(cart::v1::RUN_STATE_RUNNING);
        l.set_limit(16);
        cart::v1::ListRunsResponse r;
        CART_RETURN_IF_ERROR(call(&cart::v1::SchedulerService::Stub::ListRuns, l, r));
        for (const auto& run : r.runs()) {
          running.push_back(fmt::format("{}@{}/{}", run.name(), run.step(), run.total_steps()));
        }
      }
      done += finished;
      total += s.run_total();
      if (names.size() > 1)
        per_sweep.push_back(fmt::format("{} {}/{}", name, finished, s.run_total()));
    }
    if (!active || std::chrono::steady_clock::now() - last_print > std::chrono::seconds(10)) {
      const auto minutes =
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
              .count() /
          60.0;
      std::cout << fmt::format(
                       "[{:.1f} min] {}/{} runs done{}; {}\n", minutes, done, total,
                       per_sweep.empty() ? "" : " (" + StrJoin(per_sweep, ", ") + ")",
                       running.empty() ? "none running" : "running " + StrJoin(running, " "))
                << std::flush;
      last_print = std::chrono::steady_clock::now();
    }
    if (!active) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return absl::OkStatus();
}

// This box's tokens, from <data_dir>/tokens, written there on first use: one for the person who
// runs `cart up` (written to the client config; admin, so that they may also drain this box's
// workers) and one worker token. The worker token is bound to the ids its name covers
// (server/auth.h): the local workers are "<name>-0", "<name>-1", ...
struct LocalTokens {
  std::string path;
  std::string user, worker, worker_name = "local";
};

absl::StatusOr<LocalTokens> ReadOrWriteTokens(const std::string& data_dir) {
  LocalTokens t;
  t.path = (fs::path(data_dir) / "tokens").string();
  if (absl::StatusOr<std::string> text = ReadWholeFile(t.path); text.ok()) {
    for (const std::string& line : Split(*text, '\n')) {
      std::vector<std::string> f = Split(std::string(Trim(line)), ' ');
      if (f.size() >= 2 && (f[1] == "admin" || f[1] == "user") && t.user.empty()) t.user = f[0];
      if (f.size() >= 3 && f[1] == "worker" && t.worker.empty()) {
        t.worker = f[0];
        t.worker_name = f[2];
      }
    }
  }
  if (t.user.empty() || t.worker.empty()) {
    t.user = RandomHex(16);
    t.worker = RandomHex(16);
    t.worker_name = "local";
    CART_RETURN_IF_ERROR(
        WriteFileAtomically(t.path,
                            StrCat("# written by cart up\n", t.user, " admin local\n", t.worker,
                                   " worker ", t.worker_name, "\n"),
                            0600));
  }
  return t;
}

// cartd in this process, on the box's data dir; the user's client config points at it.
absl::StatusOr<std::unique_ptr<server::ServerHandle>> StartEmbeddedCartd(
    const UpArgs& a, const LocalTokens& tokens, rpc::ClientConfig& client) {
  server::ServerConfig config;
  config.listen = a.listen;
  config.data_dir = a.data_dir;
  config.tokens_file = tokens.path;
  config.lease_ttl = absl::Seconds(a.lease_ttl_s);
  config.http_listen = a.http == "off" ? std::string() : a.http;
#ifdef CART_WEB_DIR
  config.web_dir = CART_WEB_DIR;
#endif
  // The default dashboard port may belong to another cartd: then any free port will do.
  config.http_any_port_if_busy = !a.http_given;
  CART_ASSIGN_OR_RETURN(std::unique_ptr<server::ServerHandle> server, server::RunServer(config));
  client.server = server->dial_address();
  client.token = tokens.user;
  CART_RETURN_IF_ERROR(rpc::WriteClientConfig(client, a.client_config));
  // Every line a user waits for is flushed: under a supervisor, nohup or `| tee` stdout is a
  // file or a pipe, fully buffered, and the addresses would appear only at exit.
  std::cout << fmt::format("cartd listening on {} (data in {}); client config {}\n", client.server,
                           a.data_dir, a.client_config)
            << std::flush;
  if (!server->dashboard_url().empty()) {
    // The token rides in the URL's fragment, which the browser never sends to a server; the page
    // keeps it and drops it from the address bar (docs/dashboard.md).
    std::cout << fmt::format("dashboard: {}#token={}\n", server->dashboard_url(), tokens.user)
              << std::flush;
  }
  return server;
}

// SIGTERM (a running job checkpoints and is requeued), then SIGKILL after 60 s.
void StopWorkers(const std::vector<pid_t>& workers) {
  for (pid_t pid : workers) kill(pid, SIGTERM);
  for (pid_t pid : workers) {
    int status = 0;
    for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
}

// The cart-worker processes beside this program (one per usable GPU, or a.workers on the CPU:
// cli/local_workers.h), each with a cache dir of its own under the data dir.
absl::StatusOr<std::vector<pid_t>> StartLocalWorkers(const UpArgs& a, const std::string& address,
                                                     const LocalTokens& tokens) {
  const std::string exe =
      (fs::read_symlink("/proc/self/exe").parent_path() / "cart-worker").string();
  CART_ASSIGN_OR_RETURN(
      LocalWorkerPlan plan,
      PlanLocalWorkers(a.device, a.workers, UsableGpuCount(), CART_WORKER_CUDA != 0));
  if (!plan.note.empty()) std::cout << "cart up: " << plan.note << "\n";
  std::vector<pid_t> workers;
  for (int i = 0; i < static_cast<int>(plan.devices.size()); ++i) {
    std::vector<std::string> args = {
        "--server",        address,
        "--device",        plan.devices[static_cast<size_t>(i)],
        "--worker-id",     fmt::format("{}-{}", tokens.worker_name, i),
        "--threads",       std::to_string(a.threads),
        "--cache-dir",     (fs::path(a.data_dir) / fmt::format("worker-{}", i)).string(),
        "--client-config", "/dev/null"};
    if (i < static_cast<int>(a.worker_memory_mib.size())) {
      args.insert(args.end(), {"--memory-mib", std::to_string(a.worker_memory_mib[i])});
    }
    absl::StatusOr<pid_t> pid = SpawnWorker(exe, args, a.threads, tokens.worker);
    if (!pid.ok()) {
      StopWorkers(workers);  // those already started
      return pid.status();
    }
    workers.push_back(*pid);
  }
  std::cout << fmt::format("started {} local worker(s) on {} ({} thread(s) each)\n", workers.size(),
                           StrJoin(plan.devices, ", "), a.threads)
            << std::flush;
  return workers;
}

// Submits each sweep file (bound to its data as it is now: docs/architecture.md "Runs are bound to
// their data by content"), idempotently, so that `cart up` run again resumes them; returns the
// sweeps' names.
template <typename Call>
absl::StatusOr<std::vector<std::string>> SubmitSweeps(const std::vector<std::string>& files,
                                                      Call& call) {
  std::vector<std::string> names;
  for (const std::string& file : files) {
    CART_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(file));
    cart::v1::SubmitSweepRequest req;
    if (absl::StatusOr<config::SweepSpec> spec = config::ParseSweepYaml(text, file); spec.ok()) {
      CART_ASSIGN_OR_RETURN(std::vector<cart::v1::DataIdentity> data,
                            SweepDataIdentities(*spec, nullptr));
      for (cart::v1::DataIdentity& f : data) *req.add_data_files() = std::move(f);
    }
    req.set_spec_yaml(text);
    req.set_file_name(file);
    req.set_request_id("cart-up:" + file + ":" + std::to_string(std::hash<std::string>{}(text)));
    cart::v1::SubmitSweepResponse resp;
    CART_RETURN_IF_ERROR(call(&cart::v1::SchedulerService::Stub::SubmitSweep, req, resp));
    names.push_back(resp.sweep().name());
    int64_t runs = 0;
    for (const auto& [state, n] : resp.sweep().runs_by_state()) runs += n;
    std::cout << fmt::format("{} sweep {} ({} runs)\n", resp.existing() ? "resuming" : "submitted",
                             names.back(), runs)
              << std::flush;
  }
  return names;
}

// The pivot table of each --table-metric over the first sweep.
template <typename Call>
absl::Status PrintTables(const UpArgs& a, const std::string& sweep, Call& call) {
  for (const std::string& metric : a.table_metrics) {
    cart::v1::QueryTableRequest q;
    q.set_table("pivot");
    q.set_metric(metric);
    q.set_rows(a.table_rows);
    q.set_cols(a.table_cols);
    q.add_sweeps(sweep);
    cart::v1::Table table;
    CART_RETURN_IF_ERROR(call(&cart::v1::SchedulerService::Stub::QueryTable, q, table));
    std::cout << "\n";
    PrintResultTable(table, "text", std::cout);
  }
  return absl::OkStatus();
}

// The sweeps run to their end, then their tables and report (unless interrupted).
absl::Status RunSweeps(const UpArgs& a, const rpc::ClientConfig& client) {
  auto channel = grpc::CreateChannel(client.server, grpc::InsecureChannelCredentials());
  auto stub = cart::v1::SchedulerService::NewStub(channel);
  auto call = [&](auto method, const auto& req, auto& resp) {
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, client, 30'000);
    return rpc::FromGrpc(((*stub).*method)(&ctx, req, &resp));
  };
  CART_ASSIGN_OR_RETURN(std::vector<std::string> names, SubmitSweeps(a.sweeps, call));
  CART_RETURN_IF_ERROR(WaitForSweeps(names, call));
  if (g_interrupted) return absl::OkStatus();
  CART_RETURN_IF_ERROR(PrintTables(a, names.front(), call));
  if (g_interrupted || a.report_dir.empty()) return absl::OkStatus();
  report::ReportOptions options;
  options.out_dir = a.report_dir;
  options.html = true;
  CART_RETURN_IF_ERROR(ApplyReportSweeps(a.report_sweeps, options.sweeps));
  return WriteServiceReport(client, options);
}

absl::Status Up(const UpArgs& a) {
  CART_RETURN_IF_ERROR(CreatePrivateDir(a.data_dir));
  CART_ASSIGN_OR_RETURN(LocalTokens tokens, ReadOrWriteTokens(a.data_dir));
  rpc::ClientConfig client;
  CART_ASSIGN_OR_RETURN(std::unique_ptr<server::ServerHandle> server,
                        StartEmbeddedCartd(a, tokens, client));
  absl::StatusOr<std::vector<pid_t>> workers = StartLocalWorkers(a, client.server, tokens);
  if (!workers.ok()) {
    server->Shutdown();
    server->Wait();
    return workers.status();
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  absl::Status result = absl::OkStatus();
  if (!a.sweeps.empty()) {
    result = RunSweeps(a, client);
  } else {
    std::cout << "press Ctrl-C to stop; in another shell: cart sweep submit FILE\n" << std::flush;
    while (!g_interrupted) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // Workers first, then the server.
  StopWorkers(*workers);
  server->Shutdown();
  server->Wait();
  return result;
}

void UpCommand(const UpArgs& a) {
  if (absl::Status s = Up(a); !s.ok()) ExitWith(s);
}

}  // namespace

void RegisterUpCommand(CLI::App& app) {
  auto a = std::make_shared<UpArgs>();
  CLI::App* up = app.add_subcommand(
      "up",
      "Run cartd and local workers on this box, one per GPU or on the CPU (and optionally one "
      "sweep to the end)");
  up->add_option("--data-dir", a->data_dir, "Database, artifacts, tokens")->capture_default_str();
  up->add_option("--listen", a->listen, "cartd address")->capture_default_str();
  up->add_option("--http", a->http,
                 "dashboard address, or 'off' (a busy default port falls back to a free one; "
                 "docs/dashboard.md)")
      ->capture_default_str()
      ->each([a](const std::string&) { a->http_given = true; });
  up->add_option("--device", a->device,
                 "auto: one worker per usable NVIDIA GPU, else CPU workers; cpu; cuda")
      ->capture_default_str();
  up->add_option("--workers", a->workers, "Local cart-worker processes on the CPU")
      ->capture_default_str();
  up->add_option("--threads", a->threads, "CPU threads per worker")->capture_default_str();
  up->add_option("--worker-memory-mib", a->worker_memory_mib,
                 "Device memory each worker reports, MiB (repeatable, one per worker)");
  up->add_option("--lease-ttl", a->lease_ttl_s, "Lease TTL, seconds")->capture_default_str();
  up->add_option("--sweep", a->sweeps,
                 "Submit this sweep (repeatable, in order), wait for all, print the tables of the "
                 "first, exit");
  up->add_option("--rows", a->table_rows, "Table rows key")->capture_default_str();
  up->add_option("--cols", a->table_cols, "Table columns key")->capture_default_str();
  up->add_option("--metric", a->table_metrics, "Table metric (repeatable)")->capture_default_str();
  up->add_option("--report", a->report_dir,
                 "After the sweeps: write `cart report` (Markdown, HTML, CSVs, plots) here");
  up->add_option("--report-sweep", a->report_sweeps,
                 "ROLE=SWEEP: which sweep holds a part of the study in the report (roles: stage1, "
                 "stage2, baselines, ablations, faithfulness, leak, variable_r)");
  up->add_option("--client-config", a->client_config, "Where to write the client config")
      ->capture_default_str();
  OnRun(up, [a] { UpCommand(*a); });
}

}  // namespace cart::cli
