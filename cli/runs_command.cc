// cart runs ls | show | logs | cancel | resume | extend: one run at a time on cartd (tag, untag
// and note come from annotate_command.cc).

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

using cart::v1::RunState;

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

struct LsArgs {
  Conn conn;
  std::string sweep;
  std::vector<std::string> states;
  std::vector<std::string> tags;
};

struct IdArgs {
  Conn conn;
  int64_t id = 0;
  int64_t steps = 0;
  bool follow = false;
  std::string schedule;          // extend: stretch | hold | "" (cartd asks when it matters)
  std::vector<std::string> set;  // resume: key=value changes
};

struct LogArgs {
  Conn conn;
  int64_t id = 0;
  bool follow = false;
  bool metrics = false;
  int tail = 0;
};

// cart runs ls: the runs of a sweep, by state and tag.
void ListCommand(const LsArgs& la) {
  cart::v1::ListRunsRequest req;
  req.set_sweep(la.sweep);
  for (const std::string& tag : la.tags) req.add_tags(tag);
  for (const std::string& s : la.states) {
    RunState state;
    if (!cart::v1::RunState_Parse("RUN_STATE_" + ToUpper(s), &state)) {
      ExitWith(absl::InvalidArgumentError(StrCat(
          "--state: '", s,
          "' is not one of QUEUED, BLOCKED, LEASED, RUNNING, SUCCEEDED, FAILED, CANCELLED")));
    }
    req.add_states(state);
  }
  Client client = Client::Connect(la.conn);
  cart::v1::ListRunsResponse resp = ListAllRuns(client, req);
  if (la.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  PrintRuns(resp.runs(), false);
}

// cart runs show ID: config, state, why it waits, events, checkpoints.
void ShowCommand(const IdArgs& sh) {
  Client client = Client::Connect(sh.conn);
  cart::v1::GetRunRequest req;
  req.set_run_id(sh.id);
  auto resp = client.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
      &cart::v1::SchedulerService::Stub::GetRun, req);
  if (sh.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  const auto& r = resp.run();
  std::cout << fmt::format("run {} ({})  {}  attempt {}/{}  step {}/{}  {}\n", r.run_id(), r.name(),
                           Colored(StateName(r.state())), r.attempt(), r.max_attempts(), r.step(),
                           r.total_steps(), Progress(r));
  if (!r.waiting_reason().empty()) std::cout << "waiting: " << r.waiting_reason() << "\n";
  if (r.has_diverged()) {
    std::cout << fmt::format(
        "diverged: loss {} at step {}; not retried (resume with a change: cart runs resume {} "
        "--set lr=...)\n",
        r.diverged().loss(), r.diverged().step(), r.run_id());
  }
  if (!r.worker_id().empty()) std::cout << "worker: " << r.worker_id() << "\n";
  std::cout << DeviceClassLine(r) << "\n";
  for (const auto& tag : r.tags()) {
    std::cout << fmt::format("tag: {} ({}, {})\n", tag.name(), tag.who(), When(tag.at_us()));
  }
  std::cout << NoteBlock(r.note());
  if (r.expected_finish_us() > 0) {
    std::cout << "expected finish: " << ExpectedAt(r.expected_finish_us()) << "\n";
  }
  std::cout << fmt::format(
      "params: {:.2f}M stored, {:.2f}M effective; memory estimate {} on a GPU worker\n",
      r.stored_params() / 1e6, r.effective_params() / 1e6, Mib(r.memory_estimate_mib()));
  if (!r.latest().empty()) {
    std::cout << "latest:";
    for (const auto& [k, v] : r.latest()) {
      if (k.rfind("sys/", 0) == 0 || k.rfind("h_norm/", 0) == 0 || k.rfind("rel_update/", 0) == 0)
        continue;
      std::cout << fmt::format(" {}={:.5g}", k, v);
    }
    std::cout << "\n";
  }
  if (!resp.data().empty()) {
    std::cout << "data (docs/architecture.md \"Data lineage\"):\n";
    for (const auto& d : resp.data()) {
      if (d.sha256().empty()) {
        std::cout << fmt::format("  {} {}: not recorded yet (its first worker records it)\n",
                                 d.role(), d.path());
        continue;
      }
      std::string what = fmt::format("{} bytes", d.size_bytes());
      if (d.tokens() >= 0)
        what += fmt::format(", {} tokens, tokenizer {}", d.tokens(), d.tokenizer());
      std::cout << fmt::format("  {} {}: sha256 {}\n    {}; recorded by {}, {}\n", d.role(),
                               d.path(), d.sha256(), what, d.recorded_by(), When(d.recorded_us()));
    }
  }
  std::cout << AnnotationHistoryBlock(resp.annotation_history());
  std::cout << AttemptsBlock(resp.attempts());
  if (resp.has_spending()) std::cout << "spent: " << resp.spending().text() << "\n";
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
}

// cart runs logs ID: the worker log lines (or, with --metrics, the metric log).
void LogsCommand(const LogArgs& lg) {
  if (lg.metrics) {
    PrintMetricLog(lg.id, lg.follow, lg.conn);
    return;
  }
  Client client = Client::Connect(lg.conn);
  cart::v1::StreamRunLogRequest req;
  req.set_run_id(lg.id);
  req.set_follow(lg.follow);
  req.set_tail(lg.tail);
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client.config(), 0);
  auto reader = client.stub().StreamRunLog(&ctx, req);
  cart::v1::RunLogView view;
  while (reader->Read(&view)) {
    for (const auto& line : view.lines()) {
      if (lg.conn.json) {
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
}

// The calls behind `cart runs cancel|resume|extend`.
cart::v1::RunResponse CancelRun(Client& c, const IdArgs& a) {
  cart::v1::CancelRunRequest req;
  req.set_run_id(a.id);
  req.set_reason("cart runs cancel");
  return c.Call<cart::v1::CancelRunRequest, cart::v1::RunResponse>(
      &cart::v1::SchedulerService::Stub::CancelRun, req);
}

cart::v1::RunResponse ResumeRun(Client& c, const IdArgs& a) {
  cart::v1::ResumeRunRequest req;
  req.set_run_id(a.id);
  for (const std::string& s : a.set) req.add_set(s);
  return c.Call<cart::v1::ResumeRunRequest, cart::v1::RunResponse>(
      &cart::v1::SchedulerService::Stub::ResumeRun, req);
}

cart::v1::RunResponse ExtendRun(Client& c, const IdArgs& a) {
  cart::v1::ExtendRunRequest req;
  req.set_run_id(a.id);
  req.set_total_steps(a.steps);
  if (a.schedule == "stretch") req.set_schedule(cart::v1::EXTEND_SCHEDULE_STRETCH);
  if (a.schedule == "hold") req.set_schedule(cart::v1::EXTEND_SCHEDULE_HOLD);
  return c.Call<cart::v1::ExtendRunRequest, cart::v1::RunResponse>(
      &cart::v1::SchedulerService::Stub::ExtendRun, req);
}

cart::v1::RunResponse SetDeviceClass(Client& c, int64_t run_id, bool any) {
  cart::v1::SetRunDeviceClassRequest req;
  req.set_run_id(run_id);
  req.set_any(any);
  req.set_reason(any ? "cart runs unpin" : "cart runs pin");
  return c.Call<cart::v1::SetRunDeviceClassRequest, cart::v1::RunResponse>(
      &cart::v1::SchedulerService::Stub::SetRunDeviceClass, req);
}
cart::v1::RunResponse UnpinRun(Client& c, const IdArgs& a) { return SetDeviceClass(c, a.id, true); }
cart::v1::RunResponse PinRun(Client& c, const IdArgs& a) { return SetDeviceClass(c, a.id, false); }

using RunAction = cart::v1::RunResponse (*)(Client&, const IdArgs&);

// One action on one run: the call, then the run's new state (and, after an extension, the
// learning rate on each side of it).
void RunActionCommand(const IdArgs& a, RunAction call) {
  Client client = Client::Connect(a.conn);
  const cart::v1::RunResponse resp = call(client, a);
  if (a.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  std::cout << fmt::format("run {} ({}): {}\n", resp.run().run_id(), resp.run().name(),
                           StateName(resp.run().state()));
  if (call == &UnpinRun || call == &PinRun) std::cout << DeviceClassLine(resp.run()) << "\n";
  if (resp.schedule() != cart::v1::EXTEND_SCHEDULE_UNSPECIFIED) {
    std::cout << fmt::format(
        "learning rate {:.2e} at its last step -> {:.2e} on the first step of the extension "
        "(schedule {})\n",
        resp.lr_before(), resp.lr_after(),
        resp.schedule() == cart::v1::EXTEND_SCHEDULE_HOLD ? "hold" : "stretch");
  }
}

void AddResumeFlags(CLI::App* cmd, IdArgs& a) {
  cmd->add_option("--set", a.set,
                  "KEY=VALUE: change the run's config before it resumes (lr, lr_min, warmup, "
                  "clip, dtype); a run that diverged resumes only with one (repeatable)");
}

void AddExtendFlags(CLI::App* cmd, IdArgs& a) {
  cmd->add_option("--steps", a.steps, "New total steps (larger than the current)")->required();
  cmd->add_option("--schedule", a.schedule,
                  "The learning rate after the run's last step: stretch (the cosine "
                  "recomputed over the new total, a warm restart) or hold (go on at the "
                  "final rate). Without it cartd stretches when the rate changes at most 2x "
                  "and refuses otherwise (docs/design.md \"Extending a run\")")
      ->check(CLI::IsMember({"stretch", "hold"}));
}

// `cart runs NAME ID`, with the action's own flags (`add_flags`, may be null).
void AddRunAction(CLI::App* runs, const char* name, const char* help, RunAction call,
                  void (*add_flags)(CLI::App*, IdArgs&)) {
  auto a = std::make_shared<IdArgs>();
  CLI::App* cmd = runs->add_subcommand(name, help);
  cmd->add_option("id", a->id, "Run id")->required();
  if (add_flags != nullptr) add_flags(cmd, *a);
  AddConnFlags(cmd, a->conn);
  OnRun(cmd, [a, call] { RunActionCommand(*a, call); });
}

void RegisterRuns(CLI::App& app) {
  CLI::App* runs =
      app.add_subcommand("runs", "List, inspect, cancel, resume, extend, tag and annotate runs");
  runs->require_subcommand(1);

  auto la = std::make_shared<LsArgs>();
  CLI::App* ls = runs->add_subcommand("ls", "List runs");
  ls->add_option("--sweep", la->sweep, "Only this sweep");
  ls->add_option("--state", la->states, "Only these states (QUEUED, RUNNING, …; repeatable)");
  ls->add_option("--tag", la->tags, "Only runs carrying this tag (repeatable: every one)");
  AddConnFlags(ls, la->conn);
  OnRun(ls, [la] { ListCommand(*la); });

  auto sh = std::make_shared<IdArgs>();
  CLI::App* show =
      runs->add_subcommand("show", "One run: config, state, why it waits, events, checkpoints");
  show->add_option("id", sh->id, "Run id")->required();
  AddConnFlags(show, sh->conn);
  OnRun(show, [sh] { ShowCommand(*sh); });

  RegisterRunsDiffCommand(*runs);

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
  OnRun(logs, [lg] { LogsCommand(*lg); });

  AddRunAction(runs, "cancel", "Cancel a run (a running one stops after a final checkpoint)",
               &CancelRun, nullptr);
  AddRunAction(runs, "resume", "Requeue a cancelled or failed run from its latest checkpoint",
               &ResumeRun, &AddResumeFlags);
  AddRunAction(runs, "extend", "Train a run further: raise its total steps and requeue it",
               &ExtendRun, &AddExtendFlags);
  AddRunAction(runs, "unpin",
               "Let a run's later attempts go to any device class, not only the one that wrote "
               "its latest checkpoint (docs/architecture.md \"Device classes\")",
               &UnpinRun, nullptr);
  AddRunAction(runs, "pin",
               "Keep a run's later attempts on the device class of its latest checkpoint again "
               "(the default)",
               &PinRun, nullptr);
  AddAnnotateCommands(runs, /*sweep=*/false);
}

}  // namespace

void RegisterRunsCommands(CLI::App& app) { RegisterRuns(app); }

}  // namespace cart::cli
