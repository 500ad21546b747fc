// `cart runs diff A B`: how two runs differ (docs/architecture.md "Comparing runs"): the config
// keys that differ, their data identities, what their latest recorded attempts ran on, their
// final metrics with the deltas, and the first step at which their loss series part. Two runs of
// one config on one device class part at no step (training on the CPU is deterministic here);
// where they part says when a difference began to matter.
//
// `cart reproduce RUN`: the run's resolved config submitted again as a sweep of its own, bound
// to the original's data identities (refused here, naming both sha256s, when a file on this
// machine differs); with --wait, the verdict once it ends: bit-identical losses, or the first
// step they part and the largest deviation, and what the two ran on that differs.

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/lineage.h"
#include "common/run_comparison.h"
#include "common/strings.h"
#include "config/sweep.h"

namespace cart::cli {
namespace {

using json = nlohmann::json;

struct DiffArgs {
  Conn conn;
  std::string a;
  std::string b;
  std::string metric = "loss";
};

cart::v1::GetRunResponse FetchRun(Client& client, const std::string& which) {
  cart::v1::GetRunRequest req;
  if (std::optional<int64_t> id = ParseInt64(which)) {
    req.set_run_id(*id);
  } else {
    req.set_name(which);
  }
  return client.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
      &cart::v1::SchedulerService::Stub::GetRun, req);
}

// The environment of the run's latest attempt that recorded one, and that attempt's number.
std::pair<int64_t, std::map<std::string, std::string>> LatestEnvironment(
    const cart::v1::GetRunResponse& run) {
  for (auto it = run.attempts().rbegin(); it != run.attempts().rend(); ++it) {
    if (it->environment().empty()) continue;
    std::map<std::string, std::string> items;
    for (const auto& item : it->environment()) items[item.key()] = item.value();
    return {it->attempt(), items};
  }
  return {0, {}};
}

std::map<int64_t, double> Series(Client& client, int64_t run_id, const std::string& metric) {
  cart::v1::StreamMetricsRequest req;
  req.set_run_id(run_id);
  req.add_names(metric);
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client.config(), 0);
  auto reader = client.stub().StreamMetrics(&ctx, req);
  std::map<int64_t, double> out;
  cart::v1::MetricBatchView batch;
  while (reader->Read(&batch)) {
    for (const auto& p : batch.points()) out[p.step()] = p.value();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) client.Fail(s);
  return out;
}

// "TITLE: NONE" when `diffs` is empty, else "TITLE (N differ):" and a line per key.
void PrintDifferences(const std::string& title, const std::vector<Difference>& diffs,
                      const std::string& none) {
  if (diffs.empty()) {
    std::cout << title << ": " << none << "\n";
    return;
  }
  std::cout << fmt::format("{} ({} differ):\n", title, diffs.size());
  for (const Difference& d : diffs) std::cout << fmt::format("  {}: {} | {}\n", d.key, d.a, d.b);
}

// A run's device classes for one line: "NVIDIA GeForce RTX 3090", several joined and flagged.
std::string ClassesText(const cart::v1::RunView& run) {
  if (run.device_classes().empty()) return "none recorded";
  std::string text = StrJoin(run.device_classes(), ", then ");
  return run.device_classes_size() > 1 ? text + " (spans classes)" : text;
}

void DiffCommand(const DiffArgs& args) {
  Client client = Client::Connect(args.conn);
  const cart::v1::GetRunResponse a = FetchRun(client, args.a);
  const cart::v1::GetRunResponse b = FetchRun(client, args.b);
  const auto& ra = a.run();
  const auto& rb = b.run();

  const auto config = Differences(ConfigKeys(ra.config_yaml()), ConfigKeys(rb.config_yaml()));
  std::map<std::string, std::string> data_a;
  std::map<std::string, std::string> data_b;
  for (const auto& d : a.data()) data_a[d.role() + " " + d.path()] = d.sha256();
  for (const auto& d : b.data()) data_b[d.role() + " " + d.path()] = d.sha256();
  const auto data = Differences(data_a, data_b);
  const auto [attempt_a, env_a] = LatestEnvironment(a);
  const auto [attempt_b, env_b] = LatestEnvironment(b);
  const auto environment = Differences(env_a, env_b);

  const std::map<int64_t, double> sa = Series(client, ra.run_id(), args.metric);
  const std::map<int64_t, double> sb = Series(client, rb.run_id(), args.metric);
  const SeriesComparison series = CompareSeries(sa, sb);
  const int64_t common = series.common;
  const std::optional<int64_t> parted = series.parted;

  if (args.conn.json) {
    json out;
    auto classes = [](const cart::v1::RunView& r) {
      return std::vector<std::string>(r.device_classes().begin(), r.device_classes().end());
    };
    out["a"] = json{{"run_id", ra.run_id()}, {"name", ra.name()}, {"device_classes", classes(ra)}};
    out["b"] = json{{"run_id", rb.run_id()}, {"name", rb.name()}, {"device_classes", classes(rb)}};
    auto rows = [](const auto& diffs) {
      json j = json::array();
      for (const Difference& d : diffs) j.push_back(json{{"key", d.key}, {"a", d.a}, {"b", d.b}});
      return j;
    };
    out["config"] = rows(config);
    out["data"] = rows(data);
    out["environment"] = rows(environment);
    json finals = json::array();
    for (const auto& [name, value] : ra.latest()) {
      auto it = rb.latest().find(name);
      if (it == rb.latest().end() || !ShownMetric(name)) continue;
      finals.push_back(
          json{{"metric", name}, {"a", value}, {"b", it->second}, {"delta", it->second - value}});
    }
    out["latest"] = finals;
    out["series"] = json{{"metric", args.metric},
                         {"common_steps", common},
                         {"first_different_step", parted ? json(*parted) : json(nullptr)}};
    std::cout << out.dump(1) << "\n";
    return;
  }
  std::cout << fmt::format("run {} ({}) against run {} ({})\n", ra.run_id(), ra.name(), rb.run_id(),
                           rb.name());
  std::cout << fmt::format("device classes: {} | {}\n", ClassesText(ra), ClassesText(rb));
  PrintDifferences("config", config, "the same");
  PrintDifferences("data", data, "the same files, the same sha256");
  if (attempt_a == 0 || attempt_b == 0) {
    std::cout << "environment: not recorded for "
              << (attempt_a == 0 && attempt_b == 0 ? "either run"
                  : attempt_a == 0                 ? "the first run"
                                                   : "the second run")
              << "\n";
  } else {
    PrintDifferences(fmt::format("environment (attempt {} | attempt {})", attempt_a, attempt_b),
                     environment, "the same");
  }
  std::cout << "latest metrics:\n";
  for (const auto& [name, value] : ra.latest()) {
    auto it = rb.latest().find(name);
    if (it == rb.latest().end() || !ShownMetric(name)) continue;
    const double delta = it->second - value;
    std::cout << fmt::format("  {}: {:.6g} | {:.6g}  ({:+.4g}{})\n", name, value, it->second, delta,
                             value != 0 ? fmt::format(", {:+.2f} %", 100 * delta / value) : "");
  }
  if (common == 0) {
    std::cout << fmt::format("{}: no step that both runs logged\n", args.metric);
  } else if (!parted) {
    std::cout << fmt::format("{}: bit-identical at all {} steps both logged (through step {})\n",
                             args.metric, common, std::min(sa.rbegin()->first, sb.rbegin()->first));
  } else {
    std::cout << fmt::format(
        "{}: the series part at step {} ({:.9g} | {:.9g}); {} steps in common\n", args.metric,
        *parted, series.a_at_parting, series.b_at_parting, common);
  }
}

struct ReproduceArgs {
  Conn conn;
  std::string run;
  std::string name;  // of the new sweep; default reproduce-<sweep>-<index>-<time>
  bool wait = false;
  int64_t timeout_s = 0;  // --wait's bound; 0: none
};

bool Terminal(cart::v1::RunState state) {
  return state == cart::v1::RUN_STATE_SUCCEEDED || state == cart::v1::RUN_STATE_FAILED ||
         state == cart::v1::RUN_STATE_CANCELLED;
}

// A sweep file of one run: `config` (a resolved config) as its base, its seed as the seeds.
std::string ReproductionSweep(const std::string& name, const std::string& config) {
  std::string base;
  std::string seed = "0";
  for (const std::string& line : Split(config, '\n')) {
    if (line.rfind("seed: ", 0) == 0) {
      seed = line.substr(6);
      continue;
    }
    if (!line.empty()) base += "  " + line + "\n";
  }
  return StrCat("name: ", name, "\nbase:\n", base, "seeds: [", seed, "]\n");
}

void ReproduceCommand(const ReproduceArgs& args) {
  Client client = Client::Connect(args.conn);
  const cart::v1::GetRunResponse original = FetchRun(client, args.run);
  const auto& run = original.run();
  if (run.kind() == cart::v1::JOB_KIND_EVAL) {
    ExitWith(absl::InvalidArgumentError(
        StrCat("run ", run.run_id(), " (", run.name(),
               ") is an evaluation; reproduce the training run it evaluates, then evaluate that")));
  }
  if (run.state() != cart::v1::RUN_STATE_SUCCEEDED) {
    ExitWith(absl::FailedPreconditionError(StrCat(
        "run ", run.run_id(), " (", run.name(), ") has not finished (it is ",
        cart::v1::RunState_Name(run.state()), "): there is no finished attempt to reproduce yet")));
  }
  std::string name = args.name;
  if (name.empty()) {
    name = StrCat("reproduce-", run.sweep(), "-", run.name().substr(run.name().rfind('/') + 1), "-",
                  absl::ToUnixSeconds(absl::Now()));
  }
  const std::string text = ReproductionSweep(name, run.config_yaml());
  absl::StatusOr<config::SweepSpec> spec = config::ParseSweepYaml(text, "the run's config");
  if (!spec.ok()) ExitWith(spec.status());
  // The data: what this machine reads must be what the original trained on.
  std::vector<std::string> missing;
  absl::StatusOr<std::vector<cart::v1::DataIdentity>> here = SweepDataIdentities(*spec, &missing);
  if (!here.ok()) ExitWith(here.status());
  cart::v1::SubmitSweepRequest req;
  for (const auto& recorded : original.data()) {
    if (recorded.sha256().empty()) continue;
    for (const auto& local : *here) {
      if (local.path() == recorded.path() && local.sha256() != recorded.sha256()) {
        ExitWith(absl::FailedPreconditionError(
            StrCat(recorded.path(), " here has sha256 ", local.sha256(), "; run ", run.run_id(),
                   " trained on sha256 ", recorded.sha256(),
                   ": put the original file back at that path to reproduce it")));
      }
    }
    cart::v1::DataIdentity* bound = req.add_data_files();
    *bound = recorded;
    bound->set_role("");
  }
  req.set_spec_yaml(text);
  req.set_file_name(StrCat("reproduction of run ", run.run_id()));
  req.set_request_id(StrCat("reproduce-", run.run_id(), "-", name));
  req.set_run_limit(1);
  auto submitted = client.Call<cart::v1::SubmitSweepRequest, cart::v1::SubmitSweepResponse>(
      &cart::v1::SchedulerService::Stub::SubmitSweep, req);
  const int64_t copy = submitted.runs_size() > 0 ? submitted.runs(0).run_id() : 0;
  std::cout << fmt::format("submitted sweep {}: run {} reproduces run {} ({}), bound to its data\n",
                           name, copy, run.run_id(), run.name());
  const auto [attempt, env] = LatestEnvironment(original);
  if (attempt > 0) {
    std::cout << fmt::format(
        "the original ran on {} ({}), LibTorch {}, {}; the copy's worker is known once one takes "
        "it\n",
        env.count("device.name") ? env.at("device.name") : "?",
        env.count("device") ? env.at("device") : "?",
        env.count("torch.version") ? env.at("torch.version") : "?",
        env.count("precision") ? env.at("precision") : "?");
  }
  if (!args.wait || copy == 0) {
    std::cout << fmt::format("compare them when it ends: cart runs diff {} {}\n", run.run_id(),
                             copy);
    return;
  }
  const absl::Time deadline =
      args.timeout_s > 0 ? absl::Now() + absl::Seconds(args.timeout_s) : absl::InfiniteFuture();
  cart::v1::GetRunResponse result;
  while (true) {
    result = FetchRun(client, StrCat(copy));
    if (Terminal(result.run().state())) break;
    if (absl::Now() > deadline) {
      ExitWith(absl::DeadlineExceededError(
          StrCat("run ", copy, " has not ended within ", args.timeout_s, " s (it is ",
                 cart::v1::RunState_Name(result.run().state()), "); cart runs diff ", run.run_id(),
                 " ", copy, " compares them later")));
    }
    absl::SleepFor(absl::Seconds(1));
  }
  if (result.run().state() != cart::v1::RUN_STATE_SUCCEEDED) {
    ExitWith(absl::AbortedError(StrCat("the reproduction, run ", copy, ", ended ",
                                       cart::v1::RunState_Name(result.run().state()))));
  }
  const std::map<int64_t, double> a = Series(client, run.run_id(), "loss");
  const std::map<int64_t, double> b = Series(client, copy, "loss");
  const SeriesComparison losses = CompareSeries(a, b);
  if (losses.common > 0 && !losses.parted && a.size() == b.size()) {
    std::cout << fmt::format("reproduced: the losses are bit-identical at all {} steps\n",
                             losses.common);
  } else if (losses.common == 0) {
    std::cout << "not comparable: the two runs logged no loss at the same step\n";
  } else {
    std::cout << fmt::format(
        "not bit-identical: the losses part at step {}; the largest deviation is {:.3g} at step {} "
        "({} steps in common)\n",
        losses.parted.value_or(0), losses.largest, losses.largest_at, losses.common);
  }
  const auto [copy_attempt, copy_env] = LatestEnvironment(result);
  PrintDifferences("environment", Differences(env, copy_env), "the same");
}

}  // namespace

void RegisterReproduceCommand(CLI::App& app) {
  auto args = std::make_shared<ReproduceArgs>();
  CLI::App* cmd = app.add_subcommand(
      "reproduce",
      "Train a finished run again from its resolved config and data identity; with --wait, say "
      "whether its losses are bit-identical");
  cmd->add_option("run", args->run, "Run id or name (<sweep>/<index>)")->required();
  cmd->add_option("--name", args->name, "Name of the new sweep (default reproduce-...)");
  cmd->add_flag("--wait", args->wait, "Wait for it to end and compare the losses");
  cmd->add_option("--timeout", args->timeout_s, "With --wait: give up after this many seconds")
      ->check(CLI::NonNegativeNumber);
  AddConnFlags(cmd, args->conn);
  OnRun(cmd, [args] { ReproduceCommand(*args); });
}

void RegisterRunsDiffCommand(CLI::App& runs) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = runs.add_subcommand(
      "diff",
      "How two runs differ: config, data, environment, latest metrics, and where their loss "
      "series part");
  cmd->add_option("a", args->a, "Run id or name (<sweep>/<index>)")->required();
  cmd->add_option("b", args->b, "Run id or name")->required();
  cmd->add_option("--metric", args->metric, "The series compared step by step (default loss)");
  AddConnFlags(cmd, args->conn);
  OnRun(cmd, [args] { DiffCommand(*args); });
}

}  // namespace cart::cli
