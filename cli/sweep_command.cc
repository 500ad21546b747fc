// cart sweep submit | ls | show | cancel | resume: sweeps on cartd, and dry runs without it.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
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
#include "cli/lineage.h"
#include "cli/provenance.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/sweep.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

using cart::v1::RunState;

struct SubmitArgs {
  Conn conn;
  std::string file, request_id;
  bool dry_run = false;
  bool no_data_identity = false;
};

void RunSubmit(const SubmitArgs& sa, const std::string& text, const config::SweepSpec& spec) {
  Client client = Client::Connect(sa.conn);
  cart::v1::SubmitSweepRequest req;
  if (!sa.no_data_identity) {
    std::vector<std::string> missing;
    absl::StatusOr<std::vector<cart::v1::DataIdentity>> files = SweepDataIdentities(spec, &missing);
    if (!files.ok()) ExitWith(files.status());
    for (cart::v1::DataIdentity& f : *files) *req.add_data_files() = std::move(f);
    for (const std::string& path : missing) {
      std::cerr << fmt::format(
          "note: {} is not here; the first worker that opens it records its identity\n", path);
    }
  }
  req.set_spec_yaml(text);
  req.set_file_name(sa.file);
  // Where the file comes from: its path, sha256 and git state (docs/architecture.md "Sweep
  // provenance"); `cart sweep show` prints it.
  *req.mutable_provenance() = SweepFileProvenance(sa.file, text);
  req.set_request_id(sa.request_id.empty() ? RandomHex(16) : sa.request_id);
  // The summary needs only the counts; --json prints every run.
  if (!sa.conn.json) req.set_run_limit(1);
  auto resp = client.Call<cart::v1::SubmitSweepRequest, cart::v1::SubmitSweepResponse>(
      &cart::v1::SchedulerService::Stub::SubmitSweep, req);
  if (sa.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  int64_t runs = 0;
  for (const auto& [state, count] : resp.sweep().runs_by_state()) runs += count;
  std::cout << fmt::format("{} sweep {} with {} runs\n",
                           resp.existing() ? "already submitted:" : "submitted",
                           resp.sweep().name(), runs);
  std::cout << fmt::format("watch it: cart sweep show {}\n", resp.sweep().name());
}

// The expanded runs with parameter counts, memory, tokens and estimated RTX 3090 hours, and the
// totals; nothing is submitted.
void PrintDryRun(const config::SweepSpec& spec, const std::vector<config::ExpandedRun>& runs,
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
    const config::RunCost cost =
        config::EstimateRunCost(r.config, r.kind == JobKind::kEval, r.eval_loops);
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

struct NameArgs {
  Conn conn;
  std::string name;
  bool diff = false;  // cart sweep show --diff
};

struct PriorityArgs {
  std::string name;
  int64_t priority = 0;
  Conn conn;
};

struct DeleteArgs {
  std::string name;
  bool yes = false;
  Conn conn;
};

// cart sweep submit: validates the file here, then submits it (with --dry-run: expands it here).
void SubmitCommand(const SubmitArgs& sa) {
  absl::StatusOr<std::string> text = ReadWholeFile(sa.file);
  if (!text.ok()) ExitWith(text.status());
  // Validate locally first: errors name file and line without a round trip.
  absl::StatusOr<config::SweepSpec> spec = config::ParseSweepYaml(*text, sa.file);
  if (!spec.ok()) ExitWith(spec.status());
  // A real submit leaves expansion to cartd, which checks every run and answers with the same
  // file:line errors (expanding here too cost as much again: 10,000 runs took 1.7 s of client
  // CPU). A dry run has no cartd: it expands here, reading the parent sweep of derived jobs
  // from its file beside this one.
  if (!sa.dry_run) {
    RunSubmit(sa, *text, *spec);
    return;
  }
  const std::vector<std::string> parent_sweeps = config::ParentSweeps(*spec);
  std::map<std::string, std::vector<config::ParentRun>> parents;
  for (const std::string& name : parent_sweeps) {
    const std::string sibling =
        (std::filesystem::path(sa.file).parent_path() / (name + ".yaml")).string();
    absl::StatusOr<std::string> ptext = ReadWholeFile(sibling);
    if (!ptext.ok()) {
      ExitWith(absl::NotFoundError(
          StrCat(sa.file, ": derived jobs start from sweep '", name, "'; a dry run reads ", sibling,
                 " for its runs (cartd resolves them from its database)")));
    }
    absl::StatusOr<config::SweepSpec> pspec = config::ParseSweepYaml(*ptext, sibling);
    if (!pspec.ok()) ExitWith(pspec.status());
    absl::StatusOr<std::vector<config::ExpandedRun>> pruns = config::ExpandSweep(*pspec, sibling);
    if (!pruns.ok()) ExitWith(pruns.status());
    for (const config::ExpandedRun& r : *pruns) {
      if (r.kind == JobKind::kTrain) parents[name].push_back(config::AsParentRun(r));
    }
  }
  absl::StatusOr<std::vector<config::ExpandedRun>> runs =
      config::ExpandSweep(*spec, sa.file, parents);
  if (!runs.ok()) ExitWith(runs.status());
  PrintDryRun(*spec, *runs, sa.conn.json);
}

// cart sweep ls
void ListCommand(const Conn& ls_conn) {
  Client client = Client::Connect(ls_conn);
  auto resp = client.Call<cart::v1::ListSweepsRequest, cart::v1::ListSweepsResponse>(
      &cart::v1::SchedulerService::Stub::ListSweeps, {});
  if (ls_conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  Table t;
  t.Header({"sweep", "created", "queued", "running", "succeeded", "failed", "cancelled",
            "expected finish", "kWh", "device-h", "budget left", "tags"});
  for (const auto& s : resp.sweeps()) {
    auto n = [&](const char* k) {
      auto it = s.runs_by_state().find(k);
      return std::to_string(it == s.runs_by_state().end() ? 0 : it->second);
    };
    t.Row({s.name(), When(s.created_us()), n("QUEUED"), n("RUNNING"), n("SUCCEEDED"), n("FAILED"),
           n("CANCELLED"), ExpectedAt(s.expected_finish_us()),
           s.spending().measured_attempts() > 0 ? fmt::format("{:.3f}", s.spending().energy_kwh())
                                                : "-",
           fmt::format("{:.2f}", s.spending().device_hours()),
           s.has_budget() ? DeviceHoursText(s.budget().left_device_hours()) : "-",
           TagList(s.tags())});
  }
  t.Print(std::cout);
}

// cart sweep show NAME: the sweep, its expected finish and its runs.
void ShowCommand(const NameArgs& show) {
  Client client = Client::Connect(show.conn);
  cart::v1::GetSweepRequest req;
  req.set_name(show.name);
  req.set_run_limit(1);  // the runs come below, in pages
  auto resp = client.Call<cart::v1::GetSweepRequest, cart::v1::GetSweepResponse>(
      &cart::v1::SchedulerService::Stub::GetSweep, req);
  cart::v1::ListRunsRequest list;
  list.set_sweep(show.name);
  *resp.mutable_runs() = std::move(*ListAllRuns(client, list).mutable_runs());
  if (show.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  std::cout << fmt::format("sweep {} ({} runs, created {})\n", resp.sweep().name(),
                           resp.runs_size(), When(resp.sweep().created_us()));
  if (!resp.sweep().tags().empty()) std::cout << "tags: " << TagList(resp.sweep().tags()) << "\n";
  std::cout << NoteBlock(resp.sweep().note());
  std::cout << AnnotationHistoryBlock(resp.annotation_history());
  if (resp.has_provenance()) {
    std::cout << "submitted from (docs/architecture.md \"Sweep provenance\"):\n";
    for (const auto& item : resp.provenance().items()) {
      std::cout << fmt::format("  {}: {}\n", item.key(), item.value());
    }
    const std::string& diff = resp.provenance().git_diff();
    if (show.diff) {
      std::cout << (diff.empty() ? std::string("  no diff: the tracked files were as committed\n")
                                 : diff + (diff.back() == '\n' ? "" : "\n"));
    } else if (!diff.empty()) {
      std::cout << fmt::format(
          "  git diff: {} lines against the commit (cart sweep show {} --diff)\n",
          std::count(diff.begin(), diff.end(), '\n'), resp.sweep().name());
    }
  } else {
    std::cout << "submitted from: not recorded (a client of a release before the record)\n";
  }
  int64_t unfinished = 0;
  for (const auto& [state, n] : resp.sweep().runs_by_state()) {
    if (state == "QUEUED" || state == "BLOCKED" || state == "LEASED" || state == "RUNNING") {
      unfinished += n;
    }
  }
  if (resp.sweep().has_budget()) {
    std::cout << BudgetText(resp.sweep().budget()) << "\n";
  }
  if (resp.sweep().has_spending()) {
    std::cout << "spent: " << resp.sweep().spending().text() << "\n";
  }
  if (resp.sweep().expected_finish_us() > 0) {
    // From cartd's placement plan over the live workers' speeds (docs/design.md "Placement").
    std::cout << fmt::format("expected finish: {} ({} of {} unfinished runs estimated{})\n",
                             ExpectedAt(resp.sweep().expected_finish_us()),
                             resp.sweep().runs_estimated(), unfinished,
                             resp.sweep().runs_estimated() < unfinished
                                 ? "; blocked runs, runs no live worker fits and runs of "
                                   "unknown work have no estimate"
                                 : "");
  } else if (unfinished > 0) {
    std::cout << "expected finish: none yet (no live worker fits its runs, or they are "
                 "blocked)\n";
  }
  PrintRuns(resp.runs(), false);
}

// cart sweep cancel NAME
void CancelCommand(const NameArgs& cancel) {
  Client client = Client::Connect(cancel.conn);
  cart::v1::CancelSweepRequest req;
  req.set_name(cancel.name);
  req.set_reason("cart sweep cancel");
  auto resp = client.Call<cart::v1::CancelSweepRequest, cart::v1::CancelSweepResponse>(
      &cart::v1::SchedulerService::Stub::CancelSweep, req);
  std::cout << fmt::format("cancelling {} runs of {} (running ones stop after a checkpoint)\n",
                           resp.runs_affected(), cancel.name);
}

// cart sweep resume NAME
void ResumeCommand(const NameArgs& resume) {
  Client client = Client::Connect(resume.conn);
  cart::v1::ResumeSweepRequest req;
  req.set_name(resume.name);
  auto resp = client.Call<cart::v1::ResumeSweepRequest, cart::v1::ResumeSweepResponse>(
      &cart::v1::SchedulerService::Stub::ResumeSweep, req);
  std::cout << fmt::format("requeued {} runs of {} from their latest checkpoints\n",
                           resp.runs_affected(), resume.name);
}

// cart sweep priority NAME P (an admin's)
void PriorityCommand(const PriorityArgs& pri) {
  Client client = Client::Connect(pri.conn);
  cart::v1::SetSweepPriorityRequest req;
  req.set_name(pri.name);
  req.set_priority(pri.priority);
  auto resp = client.Call<cart::v1::SetSweepPriorityRequest, cart::v1::SetSweepPriorityResponse>(
      &cart::v1::SchedulerService::Stub::SetSweepPriority, req);
  std::cout << fmt::format("sweep {} now has priority {} ({} unfinished runs changed)\n", pri.name,
                           pri.priority, resp.runs_affected());
}

// cart sweep delete NAME: asks first unless --yes.
void DeleteCommand(const DeleteArgs& del) {
  Client client = Client::Connect(del.conn);
  if (!del.yes) {
    cart::v1::GetSweepRequest get;
    get.set_name(del.name);
    get.set_run_limit(1);
    auto sweep = client.Call<cart::v1::GetSweepRequest, cart::v1::GetSweepResponse>(
        &cart::v1::SchedulerService::Stub::GetSweep, get);
    const std::string question =
        fmt::format("delete sweep {} with its {} runs, their metrics and checkpoints?", del.name,
                    sweep.run_total());
    if (::isatty(STDIN_FILENO) != 1) {
      ExitWith(
          absl::FailedPreconditionError(StrCat("not deleting without --yes (", question, ")")));
    }
    std::cout << question << " [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "yes") {
      std::cout << "not deleted\n";
      return;
    }
  }
  cart::v1::DeleteSweepRequest req;
  req.set_name(del.name);
  auto resp = client.Call<cart::v1::DeleteSweepRequest, cart::v1::DeleteSweepResponse>(
      &cart::v1::SchedulerService::Stub::DeleteSweep, req);
  if (del.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  std::cout << fmt::format(
      "deleted sweep {}: {} runs, {} metric points, {} checkpoints ({} files removed)\n", del.name,
      resp.runs_deleted(), resp.metric_points_deleted(), resp.checkpoints_deleted(),
      resp.artifacts_removed());
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
  submit->add_flag("--no-data-identity", sa->no_data_identity,
                   "Do not hash the sweep's data files here: the first worker that opens each "
                   "records its identity (docs/architecture.md \"Data lineage\")");
  submit->add_option("--request-id", sa->request_id,
                     "Idempotency key; the same key never creates a second sweep");
  AddConnFlags(submit, sa->conn);
  OnRun(submit, [sa] { SubmitCommand(*sa); });

  auto ls_conn = std::make_shared<Conn>();
  CLI::App* ls = sweep->add_subcommand("ls", "List sweeps with run counts by state");
  AddConnFlags(ls, *ls_conn);
  OnRun(ls, [ls_conn] { ListCommand(*ls_conn); });

  auto show = std::make_shared<NameArgs>();
  CLI::App* show_cmd = sweep->add_subcommand("show", "A sweep and its runs");
  show_cmd->add_option("name", show->name, "Sweep name")->required();
  show_cmd->add_flag("--diff", show->diff,
                     "Print the git diff its file's checkout had against its commit at submit");
  AddConnFlags(show_cmd, show->conn);
  OnRun(show_cmd, [show] { ShowCommand(*show); });

  // What `submit` would record of a file's origin, as JSON (cartlab's submit reads it).
  auto origin = std::make_shared<std::string>();
  CLI::App* provenance_cmd = sweep->add_subcommand(
      "provenance",
      "Print, as JSON, where a sweep file comes from as `submit` records it: path, sha256, and its "
      "git checkout's commit, branch, changed files and diff (docs/architecture.md \"Sweep "
      "provenance\")");
  provenance_cmd->add_option("file", *origin, "Sweep YAML")->required();
  OnRun(provenance_cmd, [origin] {
    absl::StatusOr<std::string> text = ReadWholeFile(*origin);
    if (!text.ok()) ExitWith(text.status());
    std::cout << ToJson(SweepFileProvenance(*origin, *text)) << "\n";
  });

  auto cancel = std::make_shared<NameArgs>();
  CLI::App* cancel_cmd = sweep->add_subcommand("cancel", "Cancel every unfinished run of a sweep");
  cancel_cmd->add_option("name", cancel->name, "Sweep name")->required();
  AddConnFlags(cancel_cmd, cancel->conn);
  OnRun(cancel_cmd, [cancel] { CancelCommand(*cancel); });

  auto resume = std::make_shared<NameArgs>();
  CLI::App* resume_cmd =
      sweep->add_subcommand("resume", "Requeue the cancelled and failed runs of a sweep");
  resume_cmd->add_option("name", resume->name, "Sweep name")->required();
  AddConnFlags(resume_cmd, resume->conn);
  OnRun(resume_cmd, [resume] { ResumeCommand(*resume); });

  auto pri = std::make_shared<PriorityArgs>();
  CLI::App* priority_cmd =
      sweep->add_subcommand("priority",
                            "Set a sweep's priority and its unfinished runs' (an admin's command; "
                            "placement serves higher priorities first, docs/design.md)");
  priority_cmd->add_option("name", pri->name, "Sweep name")->required();
  priority_cmd->add_option("priority", pri->priority, "The new priority")
      ->required()
      ->check(CLI::Range(int64_t{-1'000'000}, int64_t{1'000'000}));
  AddConnFlags(priority_cmd, pri->conn);
  OnRun(priority_cmd, [pri] { PriorityCommand(*pri); });

  auto del = std::make_shared<DeleteArgs>();
  CLI::App* delete_cmd = sweep->add_subcommand(
      "delete",
      "Delete a sweep with its runs, metrics, logs and checkpoints (its owner or an admin; "
      "refused while runs are running or other sweeps start from its checkpoints)");
  delete_cmd->add_option("name", del->name, "Sweep name")->required();
  delete_cmd->add_flag("--yes", del->yes,
                       "Delete without asking (needed when stdin is no terminal)");
  AddConnFlags(delete_cmd, del->conn);
  OnRun(delete_cmd, [del] { DeleteCommand(*del); });
  AddAnnotateCommands(sweep, /*sweep=*/true);
}

}  // namespace

void RegisterSweepCommands(CLI::App& app) { RegisterSweep(app); }

}  // namespace cart::cli
