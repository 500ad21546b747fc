// cart export-metrics RUN|SWEEP --format tensorboard --out DIR: a run's (or every run of a
// sweep's) metric points read from cartd and written as TensorBoard event files, one folder per run
// (DIR/<sweep>/<index>/), scalars by metric name, each point's step and wall time kept
// (cli/tensorboard.h; docs/python.md "TensorBoard").

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/tensorboard.h"
#include "common/status.h"
#include "common/strings.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

// The runs TARGET names: a run id, a run name "<sweep>/<index>", or a sweep.
std::vector<cart::v1::RunView> RunsOf(Client& client, const std::string& target) {
  if (std::optional<int64_t> id = ParseInt64(target); id && *id > 0) {
    cart::v1::GetRunRequest req;
    req.set_run_id(*id);
    return {client
                .Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
                    &cart::v1::SchedulerService::Stub::GetRun, req)
                .run()};
  }
  if (target.find('/') != std::string::npos) {
    cart::v1::GetRunRequest req;
    req.set_name(target);
    return {client
                .Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
                    &cart::v1::SchedulerService::Stub::GetRun, req)
                .run()};
  }
  cart::v1::ListRunsRequest req;
  req.set_sweep(target);
  cart::v1::ListRunsResponse all = ListAllRuns(client, req);
  if (all.runs_size() == 0) {
    ExitWith(absl::NotFoundError(
        StrCat("no run or sweep '", target, "' (a run id, <sweep>/<index>, or a sweep's name)")));
  }
  return {all.runs().begin(), all.runs().end()};
}

// The run's points, as one event per (step, wall time): each keeps its own wall time.
int64_t ExportRun(Client& client, const cart::v1::RunView& run,
                  const std::vector<std::string>& metrics, const std::string& out_dir) {
  cart::v1::StreamMetricsRequest req;
  req.set_run_id(run.run_id());
  for (const std::string& m : metrics) req.add_names(m);
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client.config(), 0);
  auto reader = client.stub().StreamMetrics(&ctx, req);
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<std::string, double>>> events;
  cart::v1::MetricBatchView batch;
  int64_t points = 0;
  while (reader->Read(&batch)) {
    for (const auto& p : batch.points()) {
      events[{p.step(), p.wall_time_us()}].emplace_back(p.name(), p.value());
      ++points;
    }
  }
  if (grpc::Status s = reader->Finish(); !s.ok()) client.Fail(s);
  const std::string dir = StrCat(out_dir, "/", run.name());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) ExitWith(absl::InternalError(StrCat("cannot create ", dir, ": ", ec.message())));
  const double created_s = static_cast<double>(run.created_us()) / 1e6;
  EventFileWriter writer(created_s);
  for (const auto& [at, values] : events) {
    writer.AddScalars(at.first, static_cast<double>(at.second) / 1e6, values);
  }
  // TensorBoard reads files named events.out.tfevents.<seconds>.<host>.
  const std::string path =
      StrCat(dir, "/events.out.tfevents.", run.created_us() / 1'000'000, ".cartlab");
  if (absl::Status s = writer.WriteTo(path); !s.ok()) ExitWith(s);
  return points;
}

struct ExportMetricsArgs {
  Conn conn;
  std::string target, format = "tensorboard", out;
  std::vector<std::string> metrics;
};

void ExportMetricsCommand(const ExportMetricsArgs& a) {
  Client client = Client::Connect(a.conn);
  const std::vector<cart::v1::RunView> runs = RunsOf(client, a.target);
  int64_t points = 0;
  for (const cart::v1::RunView& run : runs) points += ExportRun(client, run, a.metrics, a.out);
  std::cout << "wrote " << points << " points of " << runs.size() << " run"
            << (runs.size() == 1 ? "" : "s") << " to " << a.out << " (tensorboard --logdir "
            << a.out << ")\n";
}

}  // namespace

void RegisterExportMetricsCommand(CLI::App& app) {
  auto a = std::make_shared<ExportMetricsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export-metrics",
      "Write a run's or a sweep's metrics as TensorBoard event files (one folder per run)");
  cmd->add_option("target", a->target, "Run id, run name (<sweep>/<index>) or sweep")->required();
  cmd->add_option("--format", a->format, "tensorboard")
      ->check(CLI::IsMember({"tensorboard"}))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Folder to write (DIR/<sweep>/<index>/events.out.tfevents.*)")
      ->required();
  cmd->add_option("--metric", a->metrics, "Only these metrics (repeatable; default: every one)");
  AddConnFlags(cmd, a->conn);
  OnRun(cmd, [a] { ExportMetricsCommand(*a); });
}

}  // namespace cart::cli
