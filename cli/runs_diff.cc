// `cart runs diff A B`: how two runs differ (docs/architecture.md "Comparing runs"): the config
// keys that differ, their data identities, what their latest recorded attempts ran on, their
// final metrics with the deltas, and the first step at which their loss series part. Two runs of
// one config on one device class part at no step (training on the CPU is deterministic here);
// where they part says when a difference began to matter.

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"
#include "common/strings.h"

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

// The resolved config's top-level "key: value" lines.
std::map<std::string, std::string> ConfigKeys(const std::string& yaml) {
  std::map<std::string, std::string> keys;
  for (const std::string& line : Split(yaml, '\n')) {
    if (line.empty() || line[0] == ' ' || line[0] == '#') continue;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    keys[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return keys;
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

// Keys of either map whose values differ (absent on one side shows as "-").
std::vector<std::tuple<std::string, std::string, std::string>> Differences(
    const std::map<std::string, std::string>& a, const std::map<std::string, std::string>& b) {
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  std::map<std::string, std::pair<std::string, std::string>> all;
  for (const auto& [k, v] : a) all[k].first = v;
  for (const auto& [k, v] : b) all[k].second = v;
  for (const auto& [k, v] : all) {
    if (v.first != v.second) {
      out.emplace_back(k, v.first.empty() ? "-" : v.first, v.second.empty() ? "-" : v.second);
    }
  }
  return out;
}

bool Shown(const std::string& metric) {
  return metric.rfind("sys/", 0) != 0 && metric.rfind("h_norm/", 0) != 0 &&
         metric.rfind("rel_update/", 0) != 0;
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
  int64_t common = 0;
  std::optional<int64_t> parted;
  double va = 0;
  double vb = 0;
  for (const auto& [step, value] : sa) {
    auto it = sb.find(step);
    if (it == sb.end()) continue;
    ++common;
    if (!parted && !(value == it->second || (std::isnan(value) && std::isnan(it->second)))) {
      parted = step;
      va = value;
      vb = it->second;
    }
  }

  if (args.conn.json) {
    json out;
    out["a"] = json{{"run_id", ra.run_id()}, {"name", ra.name()}};
    out["b"] = json{{"run_id", rb.run_id()}, {"name", rb.name()}};
    auto rows = [](const auto& diffs) {
      json j = json::array();
      for (const auto& [k, x, y] : diffs) j.push_back(json{{"key", k}, {"a", x}, {"b", y}});
      return j;
    };
    out["config"] = rows(config);
    out["data"] = rows(data);
    out["environment"] = rows(environment);
    json finals = json::array();
    for (const auto& [name, value] : ra.latest()) {
      auto it = rb.latest().find(name);
      if (it == rb.latest().end() || !Shown(name)) continue;
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
  auto block = [](const char* title, const auto& diffs, const std::string& none) {
    if (diffs.empty()) {
      std::cout << title << ": " << none << "\n";
      return;
    }
    std::cout << fmt::format("{} ({} differ):\n", title, diffs.size());
    for (const auto& [k, x, y] : diffs) std::cout << fmt::format("  {}: {} | {}\n", k, x, y);
  };
  block("config", config, "the same");
  block("data", data, "the same files, the same sha256");
  if (attempt_a == 0 || attempt_b == 0) {
    std::cout << "environment: not recorded for "
              << (attempt_a == 0 && attempt_b == 0 ? "either run"
                  : attempt_a == 0                 ? "the first run"
                                                   : "the second run")
              << "\n";
  } else {
    block(fmt::format("environment (attempt {} | attempt {})", attempt_a, attempt_b).c_str(),
          environment, "the same");
  }
  std::cout << "latest metrics:\n";
  for (const auto& [name, value] : ra.latest()) {
    auto it = rb.latest().find(name);
    if (it == rb.latest().end() || !Shown(name)) continue;
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
        *parted, va, vb, common);
  }
}

}  // namespace

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
