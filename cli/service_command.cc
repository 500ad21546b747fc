// cart sweep | runs | results | workers — the researcher's view of cartd over gRPC.

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "google/protobuf/util/json_util.h"
#include "model/accounting.h"
#include "model/sweep.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

using cart::v1::RunState;

std::string StateName(RunState s) {
  std::string n = cart::v1::RunState_Name(s);
  return n.size() > 10 ? n.substr(10) : n;  // without "RUN_STATE_"
}

std::string Colored(const std::string& state) {
  if (!isatty(fileno(stdout))) return state;
  const char* c = "";
  if (state == "SUCCEEDED") c = "\033[32m";
  if (state == "RUNNING" || state == "LEASED") c = "\033[36m";
  if (state == "FAILED") c = "\033[31m";
  if (state == "CANCELLED" || state == "BLOCKED") c = "\033[33m";
  return *c ? StrCat(c, state, "\033[0m") : state;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Mib(int64_t mib) {
  return mib >= 1024 ? fmt::format("{:.1f} GiB", mib / 1024.0) : fmt::format("{} MiB", mib);
}

std::string When(int64_t us) {
  if (us <= 0) return "-";
  std::time_t t = us / 1'000'000;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string Progress(const cart::v1::RunView& r) {
  if (r.total_steps() <= 0) return "";
  const double f = std::min(1.0, static_cast<double>(r.step()) / r.total_steps());
  const int width = 12;
  const int full = static_cast<int>(f * width);
  return StrCat("[", std::string(full, '#'), std::string(width - full, '.'), "] ",
                fmt::format("{:>3.0f}%", 100 * f));
}

// The config keys that differ between the runs (what a reader needs to tell them apart).
std::vector<std::string> VaryingKeys(
    const google::protobuf::RepeatedPtrField<cart::v1::RunView>& runs) {
  std::vector<std::string> keys;
  if (runs.empty()) return keys;
  for (const auto& [k, v] : runs[0].params()) {
    for (const auto& r : runs) {
      auto it = r.params().find(k);
      if (it == r.params().end() || it->second != v) {
        keys.push_back(k);
        break;
      }
    }
  }
  return keys;
}

void PrintRuns(const google::protobuf::RepeatedPtrField<cart::v1::RunView>& runs, bool dry_run) {
  std::vector<std::string> keys = VaryingKeys(runs);
  Table t;
  std::vector<std::string> header = {"id", "name"};
  if (!dry_run) header.insert(header.end(), {"state", "progress", "loss", "rho"});
  for (const auto& k : keys) header.push_back(k);
  header.insert(header.end(), {"stored", "effective", "mem est"});
  if (dry_run) header.insert(header.end(), {"tokens", "3090 h"});
  t.Header(header);
  for (const auto& r : runs) {
    std::vector<std::string> row = {std::to_string(r.run_id()), r.name()};
    if (!dry_run) {
      auto metric = [&](const char* name) {
        auto it = r.latest().find(name);
        return it == r.latest().end() ? std::string("-") : fmt::format("{:.4f}", it->second);
      };
      row.insert(row.end(),
                 {Colored(StateName(r.state())), Progress(r), metric("loss"), metric("rho_max")});
    }
    for (const auto& k : keys) {
      auto it = r.params().find(k);
      row.push_back(it == r.params().end() ? "-" : it->second);
    }
    row.insert(row.end(),
               {fmt::format("{:.2f}M", r.stored_params() / 1e6),
                fmt::format("{:.2f}M", r.effective_params() / 1e6), Mib(r.memory_estimate_mib())});
    if (dry_run) {
      row.insert(row.end(), {fmt::format("{:.1f}M", r.tokens() / 1e6),
                             fmt::format("{:.2f}", r.est_hours_rtx3090())});
    }
    t.Row(row);
  }
  t.Print(std::cout);
}

std::string NewRequestId() {
  std::random_device rd;
  return fmt::format("{:016x}{:016x}", (uint64_t{rd()} << 32) | rd(),
                     (uint64_t{rd()} << 32) | rd());
}

struct SubmitArgs {
  Conn conn;
  std::string file, request_id;
  bool dry_run = false;
};

void RunSubmit(const SubmitArgs& sa, const std::string& text) {
  Client client = Client::Connect(sa.conn);
  cart::v1::SubmitSweepRequest req;
  req.set_spec_yaml(text);
  req.set_file_name(sa.file);
  req.set_request_id(sa.request_id.empty() ? NewRequestId() : sa.request_id);
  auto resp = client.Call<cart::v1::SubmitSweepRequest, cart::v1::SubmitSweepResponse>(
      &cart::v1::SchedulerService::Stub::SubmitSweep, req);
  if (sa.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  std::cout << fmt::format("{} sweep {} with {} runs\n",
                           resp.existing() ? "already submitted:" : "submitted",
                           resp.sweep().name(), resp.runs_size());
  std::cout << fmt::format("watch it: cart sweep show {}\n", resp.sweep().name());
}

// The expanded runs with parameter counts, memory, tokens and estimated RTX 3090 hours, and the
// totals; nothing is submitted.
void PrintDryRun(const model::SweepSpec& spec, const std::vector<model::ExpandedRun>& runs,
                 bool json) {
  cart::v1::SubmitSweepResponse resp;
  resp.mutable_sweep()->set_name(spec.name);
  int64_t train_runs = 0, tokens = 0;
  double hours = 0;
  for (const auto& r : runs) {
    auto* v = resp.add_runs();
    v->set_name(r.name);
    v->set_kind(r.kind == JobKind::kEval ? cart::v1::JOB_KIND_EVAL : cart::v1::JOB_KIND_TRAIN);
    for (const auto& [k, val] : r.params) (*v->mutable_params())[k] = val;
    v->set_stored_params(r.stored_params);
    v->set_effective_params(r.effective_params);
    v->set_memory_estimate_mib(r.memory_estimate_bytes >> 20);
    v->set_total_steps(r.config.train.steps);
    const model::RunCost cost = model::EstimateRunCost(r.config, r.kind == JobKind::kEval, r.eval_loops);
    v->set_tokens(cost.tokens);
    v->set_est_hours_rtx3090(cost.rtx3090_hours);
    train_runs += r.kind == JobKind::kTrain;
    tokens += cost.tokens;
    hours += cost.rtx3090_hours;
  }
  if (json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  std::cout << fmt::format("sweep {}: {} runs ({} train, {} eval; dry run, nothing submitted)\n",
                           spec.name, runs.size(), train_runs,
                           static_cast<int64_t>(runs.size()) - train_runs);
  PrintRuns(resp.runs(), true);
  const std::string amount = tokens >= 1'000'000'000
                                 ? fmt::format("{:.2f}B", static_cast<double>(tokens) / 1e9)
                                 : fmt::format("{:.1f}M", static_cast<double>(tokens) / 1e6);
  const std::string time = hours >= 1 ? fmt::format("{:.1f} GPU-hours", hours)
                                      : fmt::format("{:.1f} GPU-minutes", hours * 60);
  std::cout << fmt::format(
      "total: {} tokens, ~{} on one RTX 3090 (the paper's measured throughput scaled by FLOPs; "
      "see docs/study.md)\n",
      amount, time);
}

void RegisterSweep(CLI::App& app) {
  CLI::App* sweep = app.add_subcommand("sweep", "Submit, list, inspect, cancel and resume sweeps");
  sweep->require_subcommand(1);

  auto sa = std::make_shared<SubmitArgs>();
  CLI::App* submit = sweep->add_subcommand("submit", "Submit a sweep file");
  submit->add_option("file", sa->file, "Sweep YAML")->required();
  submit->add_flag("--dry-run", sa->dry_run,
                   "Validate and print the expanded runs with parameter counts and memory "
                   "estimates; submit nothing (no cartd needed)");
  submit->add_option("--request-id", sa->request_id,
                     "Idempotency key; the same key never creates a second sweep");
  AddConnFlags(submit, sa->conn);
  submit->callback([sa] {
    absl::StatusOr<std::string> text = ReadWholeFile(sa->file);
    if (!text.ok()) ExitWith(text.status());
    // Validate locally first: errors name file and line without a round trip.
    absl::StatusOr<model::SweepSpec> spec = model::ParseSweepYaml(*text, sa->file);
    if (!spec.ok()) ExitWith(spec.status());
    // Derived jobs of another sweep start from its runs in cartd's database; locally (dry run)
    // the parent sweep's file beside this one stands in for them.
    std::map<std::string, std::vector<model::ParentRun>> parents;
    bool parents_known = true;
    for (const std::string& name : model::ParentSweeps(*spec)) {
      const std::string sibling =
          (std::filesystem::path(sa->file).parent_path() / (name + ".yaml")).string();
      absl::StatusOr<std::string> ptext = ReadWholeFile(sibling);
      if (!ptext.ok()) {
        if (sa->dry_run) {
          ExitWith(absl::NotFoundError(
              StrCat(sa->file, ": derived jobs start from sweep '", name, "'; a dry run reads ",
                     sibling, " for its runs (cartd resolves them from its database)")));
        }
        parents_known = false;
        continue;
      }
      absl::StatusOr<model::SweepSpec> pspec = model::ParseSweepYaml(*ptext, sibling);
      if (!pspec.ok()) ExitWith(pspec.status());
      absl::StatusOr<std::vector<model::ExpandedRun>> pruns = model::ExpandSweep(*pspec, sibling);
      if (!pruns.ok()) ExitWith(pruns.status());
      for (const model::ExpandedRun& r : *pruns) {
        if (r.kind == JobKind::kTrain) parents[name].push_back(model::AsParentRun(r));
      }
    }
    if (!parents_known) {  // cartd expands it against its database
      RunSubmit(*sa, *text);
      return;
    }
    absl::StatusOr<std::vector<model::ExpandedRun>> runs =
        model::ExpandSweep(*spec, sa->file, parents);
    if (!runs.ok()) ExitWith(runs.status());
    if (sa->dry_run) {
      PrintDryRun(*spec, *runs, sa->conn.json);
      return;
    }
    RunSubmit(*sa, *text);
  });

  auto ls_conn = std::make_shared<Conn>();
  CLI::App* ls = sweep->add_subcommand("ls", "List sweeps with run counts by state");
  AddConnFlags(ls, *ls_conn);
  ls->callback([ls_conn] {
    Client client = Client::Connect(*ls_conn);
    auto resp = client.Call<cart::v1::ListSweepsRequest, cart::v1::ListSweepsResponse>(
        &cart::v1::SchedulerService::Stub::ListSweeps, {});
    if (ls_conn->json) {
      std::cout << ToJson(resp) << "\n";
      return;
    }
    Table t;
    t.Header({"sweep", "created", "queued", "running", "succeeded", "failed", "cancelled"});
    for (const auto& s : resp.sweeps()) {
      auto n = [&](const char* k) {
        auto it = s.runs_by_state().find(k);
        return std::to_string(it == s.runs_by_state().end() ? 0 : it->second);
      };
      t.Row({s.name(), When(s.created_us()), n("QUEUED"), n("RUNNING"), n("SUCCEEDED"), n("FAILED"),
             n("CANCELLED")});
    }
    t.Print(std::cout);
  });

  struct NameArgs {
    Conn conn;
    std::string name;
  };
  auto show = std::make_shared<NameArgs>();
  CLI::App* show_cmd = sweep->add_subcommand("show", "A sweep and its runs");
  show_cmd->add_option("name", show->name, "Sweep name")->required();
  AddConnFlags(show_cmd, show->conn);
  show_cmd->callback([show] {
    Client client = Client::Connect(show->conn);
    cart::v1::GetSweepRequest req;
    req.set_name(show->name);
    auto resp = client.Call<cart::v1::GetSweepRequest, cart::v1::GetSweepResponse>(
        &cart::v1::SchedulerService::Stub::GetSweep, req);
    if (show->conn.json) {
      std::cout << ToJson(resp) << "\n";
      return;
    }
    std::cout << fmt::format("sweep {} ({} runs, created {})\n", resp.sweep().name(),
                             resp.runs_size(), When(resp.sweep().created_us()));
    PrintRuns(resp.runs(), false);
  });

  auto cancel = std::make_shared<NameArgs>();
  CLI::App* cancel_cmd = sweep->add_subcommand("cancel", "Cancel every unfinished run of a sweep");
  cancel_cmd->add_option("name", cancel->name, "Sweep name")->required();
  AddConnFlags(cancel_cmd, cancel->conn);
  cancel_cmd->callback([cancel] {
    Client client = Client::Connect(cancel->conn);
    cart::v1::CancelSweepRequest req;
    req.set_name(cancel->name);
    req.set_reason("cart sweep cancel");
    auto resp = client.Call<cart::v1::CancelSweepRequest, cart::v1::CancelSweepResponse>(
        &cart::v1::SchedulerService::Stub::CancelSweep, req);
    std::cout << fmt::format("cancelling {} runs of {} (running ones stop after a checkpoint)\n",
                             resp.runs_affected(), cancel->name);
  });

  auto resume = std::make_shared<NameArgs>();
  CLI::App* resume_cmd =
      sweep->add_subcommand("resume", "Requeue the cancelled and failed runs of a sweep");
  resume_cmd->add_option("name", resume->name, "Sweep name")->required();
  AddConnFlags(resume_cmd, resume->conn);
  resume_cmd->callback([resume] {
    Client client = Client::Connect(resume->conn);
    cart::v1::ResumeSweepRequest req;
    req.set_name(resume->name);
    auto resp = client.Call<cart::v1::ResumeSweepRequest, cart::v1::ResumeSweepResponse>(
        &cart::v1::SchedulerService::Stub::ResumeSweep, req);
    std::cout << fmt::format("requeued {} runs of {} from their latest checkpoints\n",
                             resp.runs_affected(), resume->name);
  });
}

// `cart runs logs --metrics`: the metric log, one line per step (JSON lines with --json).
void PrintMetricLog(int64_t run_id, bool follow, const Conn& conn) {
  Client client = Client::Connect(conn);
  cart::v1::StreamMetricsRequest req;
  req.set_run_id(run_id);
  req.set_follow(follow);
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client.config(), 0);
  auto reader = client.stub().StreamMetrics(&ctx, req);
  cart::v1::MetricBatchView batch;
  int64_t last_step = -1;
  std::map<std::string, double> line;
  auto flush = [&] {
    if (last_step < 0 || line.empty()) return;
    if (conn.json) {
      nlohmann::json j(line);
      j["step"] = last_step;
      std::cout << j.dump() << std::endl;
    } else {
      std::string text = fmt::format("step {:>7}", last_step);
      for (const auto& [k, v] : line) {
        if (k.rfind("sys/", 0) == 0 || k.rfind("h_norm/", 0) == 0 || k.rfind("rel_update/", 0) == 0)
          continue;
        text += fmt::format(" {}={:.5g}", k, v);
      }
      std::cout << text << std::endl;
    }
    line.clear();
  };
  while (reader->Read(&batch)) {
    for (const auto& p : batch.points()) {
      if (p.step() != last_step) flush();
      last_step = p.step();
      line[p.name()] = p.value();
    }
  }
  flush();
  grpc::Status s = reader->Finish();
  if (!s.ok()) client.Fail(s);
}

void RegisterRuns(CLI::App& app) {
  CLI::App* runs = app.add_subcommand("runs", "List, inspect, cancel, resume and extend runs");
  runs->require_subcommand(1);

  struct LsArgs {
    Conn conn;
    std::string sweep;
    std::vector<std::string> states;
  };
  auto la = std::make_shared<LsArgs>();
  CLI::App* ls = runs->add_subcommand("ls", "List runs");
  ls->add_option("--sweep", la->sweep, "Only this sweep");
  ls->add_option("--state", la->states, "Only these states (QUEUED, RUNNING, …; repeatable)");
  AddConnFlags(ls, la->conn);
  ls->callback([la] {
    cart::v1::ListRunsRequest req;
    req.set_sweep(la->sweep);
    for (const std::string& s : la->states) {
      RunState state;
      if (!cart::v1::RunState_Parse("RUN_STATE_" + ToUpper(s), &state)) {
        ExitWith(absl::InvalidArgumentError(StrCat(
            "--state: '", s,
            "' is not one of QUEUED, BLOCKED, LEASED, RUNNING, SUCCEEDED, FAILED, CANCELLED")));
      }
      req.add_states(state);
    }
    Client client = Client::Connect(la->conn);
    auto resp = client.Call<cart::v1::ListRunsRequest, cart::v1::ListRunsResponse>(
        &cart::v1::SchedulerService::Stub::ListRuns, req);
    if (la->conn.json) {
      std::cout << ToJson(resp) << "\n";
      return;
    }
    PrintRuns(resp.runs(), false);
  });

  struct IdArgs {
    Conn conn;
    int64_t id = 0;
    int64_t steps = 0;
    bool follow = false;
  };
  auto sh = std::make_shared<IdArgs>();
  CLI::App* show =
      runs->add_subcommand("show", "One run: config, state, why it waits, events, checkpoints");
  show->add_option("id", sh->id, "Run id")->required();
  AddConnFlags(show, sh->conn);
  show->callback([sh] {
    Client client = Client::Connect(sh->conn);
    cart::v1::GetRunRequest req;
    req.set_run_id(sh->id);
    auto resp = client.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
        &cart::v1::SchedulerService::Stub::GetRun, req);
    if (sh->conn.json) {
      std::cout << ToJson(resp) << "\n";
      return;
    }
    const auto& r = resp.run();
    std::cout << fmt::format("run {} ({})  {}  attempt {}/{}  step {}/{}  {}\n", r.run_id(),
                             r.name(), Colored(StateName(r.state())), r.attempt(), r.max_attempts(),
                             r.step(), r.total_steps(), Progress(r));
    if (!r.waiting_reason().empty()) std::cout << "waiting: " << r.waiting_reason() << "\n";
    if (!r.worker_id().empty()) std::cout << "worker: " << r.worker_id() << "\n";
    std::cout << fmt::format("params: {:.2f}M stored, {:.2f}M effective; memory estimate {}\n",
                             r.stored_params() / 1e6, r.effective_params() / 1e6,
                             Mib(r.memory_estimate_mib()));
    if (!r.latest().empty()) {
      std::cout << "latest:";
      for (const auto& [k, v] : r.latest()) {
        if (k.rfind("sys/", 0) == 0 || k.rfind("h_norm/", 0) == 0 || k.rfind("rel_update/", 0) == 0)
          continue;
        std::cout << fmt::format(" {}={:.5g}", k, v);
      }
      std::cout << "\n";
    }
    if (!resp.checkpoints().empty()) {
      std::cout << "checkpoints:";
      for (const auto& c : resp.checkpoints()) {
        std::cout << " " << c.step() << (c.final() ? " (final)" : "");
      }
      std::cout << "\n";
    }
    Table t;
    t.Header({"time", "from", "to", "who", "why"});
    for (const auto& e : resp.events())
      t.Row({When(e.time_us()), e.from_state(), e.to_state(), e.who(), e.why()});
    t.Print(std::cout);
  });

  struct LogArgs {
    Conn conn;
    int64_t id = 0;
    bool follow = false;
    bool metrics = false;
    int tail = 0;
  };
  auto lg = std::make_shared<LogArgs>();
  CLI::App* logs = runs->add_subcommand(
      "logs",
      "A run's log: what its workers said (resumes, errors), or with --metrics its metrics");
  logs->add_option("id", lg->id, "Run id")->required();
  logs->add_flag("-f,--follow", lg->follow, "Keep printing new lines until the run ends");
  logs->add_flag("--metrics", lg->metrics, "Print the metric log (one line per step) instead");
  logs->add_option("--tail", lg->tail, "Only the last N lines already stored (0: all)")
      ->check(CLI::NonNegativeNumber);
  AddConnFlags(logs, lg->conn);
  logs->callback([lg] {
    if (lg->metrics) {
      PrintMetricLog(lg->id, lg->follow, lg->conn);
      return;
    }
    Client client = Client::Connect(lg->conn);
    cart::v1::StreamRunLogRequest req;
    req.set_run_id(lg->id);
    req.set_follow(lg->follow);
    req.set_tail(lg->tail);
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, client.config(), 0);
    auto reader = client.stub().StreamRunLog(&ctx, req);
    cart::v1::RunLogView view;
    while (reader->Read(&view)) {
      for (const auto& line : view.lines()) {
        if (lg->conn.json) {
          nlohmann::json j = {{"id", line.id()},
                              {"attempt", line.attempt()},
                              {"wall_time_us", line.wall_time_us()},
                              {"text", line.text()}};
          std::cout << j.dump() << std::endl;
        } else {
          std::cout << fmt::format("{}  attempt {}  {}", When(line.wall_time_us()), line.attempt(),
                                   line.text())
                    << std::endl;
        }
      }
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) client.Fail(s);
  });

  auto simple = [&](const char* name, const char* help, auto call) {
    auto a = std::make_shared<IdArgs>();
    CLI::App* cmd = runs->add_subcommand(name, help);
    cmd->add_option("id", a->id, "Run id")->required();
    if (std::string(name) == "extend") {
      cmd->add_option("--steps", a->steps, "New total steps (larger than the current)")->required();
    }
    AddConnFlags(cmd, a->conn);
    cmd->callback([a, call] {
      Client client = Client::Connect(a->conn);
      cart::v1::RunResponse resp = call(client, *a);
      if (a->conn.json) {
        std::cout << ToJson(resp) << "\n";
        return;
      }
      std::cout << fmt::format("run {} ({}): {}\n", resp.run().run_id(), resp.run().name(),
                               StateName(resp.run().state()));
    });
  };
  simple("cancel", "Cancel a run (a running one stops after a final checkpoint)",
         [](Client& c, const IdArgs& a) {
           cart::v1::CancelRunRequest req;
           req.set_run_id(a.id);
           req.set_reason("cart runs cancel");
           return c.Call<cart::v1::CancelRunRequest, cart::v1::RunResponse>(
               &cart::v1::SchedulerService::Stub::CancelRun, req);
         });
  simple("resume", "Requeue a cancelled or failed run from its latest checkpoint",
         [](Client& c, const IdArgs& a) {
           cart::v1::ResumeRunRequest req;
           req.set_run_id(a.id);
           return c.Call<cart::v1::ResumeRunRequest, cart::v1::RunResponse>(
               &cart::v1::SchedulerService::Stub::ResumeRun, req);
         });
  simple("extend", "Train a run further: raise its total steps and requeue it",
         [](Client& c, const IdArgs& a) {
           cart::v1::ExtendRunRequest req;
           req.set_run_id(a.id);
           req.set_total_steps(a.steps);
           return c.Call<cart::v1::ExtendRunRequest, cart::v1::RunResponse>(
               &cart::v1::SchedulerService::Stub::ExtendRun, req);
         });
}

void RegisterResults(CLI::App& app) {
  struct Args {
    Conn conn;
    cart::v1::QueryTableRequest req;
    std::string table, format = "text";
    std::vector<std::string> sweeps;
  };
  auto a = std::make_shared<Args>();
  CLI::App* results = app.add_subcommand(
      "results", "Paper tables from the results database: pivot, best, deltas, series, ranks");
  results->add_option("table", a->table, "pivot | best | deltas | series | ranks")
      ->required()
      ->check(CLI::IsMember({"pivot", "best", "deltas", "series", "ranks"}));
  results->add_option("--metric", *a->req.mutable_metric(), "Metric, e.g. rho_max, val_ppl/wiki")
      ->default_val("rho_max");
  results->add_option("--rows", *a->req.mutable_rows(), "Config key for rows (pivot, best)");
  results->add_option("--cols", *a->req.mutable_cols(), "Config key for columns (pivot)");
  results->add_option("--sweep", a->sweeps, "Restrict to sweeps (ranks: exactly two)");
  results->add_option("--baseline", *a->req.mutable_baseline(),
                      "deltas: baseline group key=value,…");
  results->add_option("--group-by", *a->req.mutable_group_by(),
                      "deltas: comma-separated config keys");
  results->add_option(
      "--run",
      [a](const CLI::results_t& r) {
        a->req.set_run_id(std::stoll(r[0]));
        return true;
      },
      "series: run id");
  results->add_flag(
      "--lower-is-better", [a](int64_t) { a->req.set_lower_is_better(true); },
      "best, ranks: smaller values win (perplexity)");
  results->add_option("--value", *a->req.mutable_value(), "final (default) or latest");
  results->add_option("--format", a->format, "text | csv | markdown | json")
      ->check(CLI::IsMember({"text", "csv", "markdown", "json"}))
      ->capture_default_str();
  AddConnFlags(results, a->conn);
  results->callback([a] {
    a->req.set_table(a->table);
    for (const auto& s : a->sweeps) a->req.add_sweeps(s);
    Client client = Client::Connect(a->conn);
    auto t = client.Call<cart::v1::QueryTableRequest, cart::v1::Table>(
        &cart::v1::SchedulerService::Stub::QueryTable, a->req);
    if (a->conn.json || a->format == "json") {
      std::cout << ToJson(t) << "\n";
      return;
    }
    PrintResultTable(t, a->format, std::cout);
  });
}

void RegisterWorkers(CLI::App& app) {
  CLI::App* workers = app.add_subcommand("workers", "List and drain workers");
  workers->require_subcommand(1);
  auto lc = std::make_shared<Conn>();
  CLI::App* ls = workers->add_subcommand("ls", "Registered workers");
  AddConnFlags(ls, *lc);
  ls->callback([lc] {
    Client client = Client::Connect(*lc);
    auto resp = client.Call<cart::v1::ListWorkersRequest, cart::v1::ListWorkersResponse>(
        &cart::v1::SchedulerService::Stub::ListWorkers, {});
    if (lc->json) {
      std::cout << ToJson(resp) << "\n";
      return;
    }
    Table t;
    t.Header({"worker", "host", "device", "memory", "state", "run", "last seen"});
    for (const auto& w : resp.workers()) {
      t.Row({w.worker_id(), w.hostname(), w.device().kind() + " " + w.device().name(),
             Mib(w.device().memory_mib()), w.state(), w.run_id() ? std::to_string(w.run_id()) : "-",
             When(w.last_seen_us())});
    }
    t.Print(std::cout);
  });
  struct DrainArgs {
    Conn conn;
    std::string id;
  };
  auto da = std::make_shared<DrainArgs>();
  CLI::App* drain = workers->add_subcommand("drain", "Let a worker finish its job, then exit");
  drain->add_option("worker", da->id, "Worker id")->required();
  AddConnFlags(drain, da->conn);
  drain->callback([da] {
    Client client = Client::Connect(da->conn);
    cart::v1::DrainWorkerRequest req;
    req.set_worker_id(da->id);
    client.Call<cart::v1::DrainWorkerRequest, cart::v1::DrainWorkerResponse>(
        &cart::v1::SchedulerService::Stub::DrainWorker, req);
    std::cout << "draining " << da->id << ": it finishes its current job, then exits\n";
  });
}

#ifdef CART_CLI_WITH_TORCH
// Downloads run `run_id`'s checkpoint (`step`, 0: the newest) to `path`, checking the size and
// sha256 announced in the first chunk; returns the sha256.
std::string DownloadCheckpoint(Client& client, int64_t run_id, int64_t step,
                               const std::string& path) {
  cart::v1::GetCheckpointRequest req;
  req.set_run_id(run_id);
  req.set_step(step);
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client.config(), 0);
  auto reader = client.stub().GetCheckpoint(&ctx, req);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) ExitWith(absl::InternalError(StrCat("cannot write ", path)));
  cart::v1::ArtifactChunk chunk;
  std::string sha256;
  int64_t size = -1, received = 0;
  Sha256 digest;
  while (reader->Read(&chunk)) {
    if (size < 0) {
      sha256 = chunk.sha256();
      size = chunk.size_bytes();
    }
    digest.Update(chunk.data());
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    received += static_cast<int64_t>(chunk.data().size());
  }
  grpc::Status s = reader->Finish();
  out.close();
  if (!s.ok()) client.Fail(s);
  if (!out) ExitWith(absl::InternalError(StrCat("cannot write ", path, " (disk full?)")));
  const std::string got = digest.HexDigest();
  if (received != size || got != sha256) {
    ExitWith(absl::DataLossError(StrCat("checkpoint of run ", run_id, " arrived as ", received,
                                        " bytes with sha256 ", got, "; cartd announced ", size,
                                        " bytes, ", sha256)));
  }
  return sha256;
}

void RegisterExport(CLI::App& app) {
  struct Args {
    Conn conn;
    std::string source, out, dtype = "fp32";
    int64_t step = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "A checkpoint as safetensors with docs/model.md §8 names: from a `cart train` directory, "
      "or of a run on cartd (by id or <sweep>/<index>)");
  cmd->add_option("source", a->source, "A `cart train` output directory, or a run id / name")
      ->required();
  cmd->add_option("--out", a->out, "Output .safetensors file")->required();
  cmd->add_option("--step", a->step, "The checkpoint at this step (default: the newest)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", a->dtype, "Weights as fp32 or bf16")->capture_default_str();
  AddConnFlags(cmd, a->conn);
  cmd->callback([a] {
    ExportRequest req;
    req.out = a->out;
    req.dtype = a->dtype;
    std::string download;
    // The downloaded checkpoint goes away however this ends (ExitWith throws).
    struct RemoveDownload {
      const std::string& path;
      ~RemoveDownload() {
        if (!path.empty()) std::remove(path.c_str());
      }
    } remove_download{download};
    if (std::filesystem::is_directory(a->source)) {
      req.run_dir = a->source;
      req.step = a->step;
      req.source = a->source;
    } else {
      Client client = Client::Connect(a->conn);
      cart::v1::GetRunRequest get;
      if (std::optional<int64_t> id = ParseInt64(a->source)) {
        get.set_run_id(*id);
      } else {
        get.set_name(a->source);
      }
      const cart::v1::GetRunResponse run =
          client.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
              &cart::v1::SchedulerService::Stub::GetRun, get);
      download = StrCat(a->out, ".download-", getpid());
      const std::string sha256 = DownloadCheckpoint(client, run.run().run_id(), a->step, download);
      req.checkpoint_file = download;
      req.config_yaml = run.run().config_yaml();
      req.source = StrCat("run ", run.run().run_id(), " (", run.run().name(), ")");
      req.metadata = {{"cart_run", run.run().name()}, {"cart_checkpoint_sha256", sha256}};
    }
    absl::StatusOr<ExportResult> result = ExportModel(req);
    if (!result.ok()) ExitWith(result.status());
    if (a->conn.json) {
      std::cout << nlohmann::json{{"source", req.source},
                                  {"step", result->step},
                                  {"parameters", result->parameters},
                                  {"out", a->out}}
                       .dump()
                << "\n";
      return;
    }
    std::cout << fmt::format("exported {} at step {}: {} parameters ({}) -> {}\n", req.source,
                             result->step, result->parameters, a->dtype, a->out);
  });
}
#endif

}  // namespace

void RegisterServiceCommands(CLI::App& app) {
  RegisterSweep(app);
  RegisterRuns(app);
  RegisterResults(app);
  RegisterWorkers(app);
#ifdef CART_CLI_WITH_TORCH
  RegisterExport(app);
#endif
}

}  // namespace cart::cli
