// cart results: the results tables (pivot, best, deltas, series, ranks) from cartd, or with --db
// from a database file (the same queries, report/results_tables.h).

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
#include "report/results_tables.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

using cart::v1::RunState;

struct ResultsArgs {
  Conn conn;
  cart::v1::QueryTableRequest req;
  std::string table, format = "text";
  std::vector<std::string> sweeps;
  std::vector<std::string> tags;
  int64_t run_id = 0;
  std::string db;
};

// `cart results TABLE`: the table from cartd, or with --db from the database file directly.
void ResultsCommand(const ResultsArgs& a) {
  cart::v1::QueryTableRequest req = a.req;
  req.set_table(a.table);
  req.set_run_id(a.run_id);
  for (const auto& s : a.sweeps) req.add_sweeps(s);
  for (const auto& tag : a.tags) req.add_tags(tag);
  cart::v1::Table t;
  if (!a.db.empty()) {
    std::unique_ptr<store::RunStore> store = OpenDatabaseFile(a.db, "--db");
    absl::StatusOr<cart::v1::Table> table = report::QueryTableOverStore(*store, req);
    if (!table.ok()) ExitWith(table.status());
    t = *std::move(table);
  }
  if (a.db.empty()) {
    Client client = Client::Connect(a.conn);
    t = client.Call<cart::v1::QueryTableRequest, cart::v1::Table>(
        &cart::v1::SchedulerService::Stub::QueryTable, req);
  }
  if (a.conn.json || a.format == "json") {
    std::cout << ToJson(t) << "\n";
    return;
  }
  PrintResultTable(t, a.format, std::cout);
}

void RegisterResults(CLI::App& app) {
  auto a = std::make_shared<ResultsArgs>();
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
  results->add_option("--tag", a->tags, "Only runs carrying this tag (repeatable: every one)");
  results->add_option("--baseline", *a->req.mutable_baseline(),
                      "deltas: baseline group key=value,…");
  results->add_option("--group-by", *a->req.mutable_group_by(),
                      "deltas: comma-separated config keys");
  results->add_option("--run", a->run_id, "series: run id")
      ->check(CLI::Validator(
          [](std::string& text) {
            const std::optional<int64_t> id = ParseInt64(text);
            return id && *id > 0 ? std::string()
                                 : StrCat("run id '", text, "' is not a positive integer");
          },
          "RUN_ID"));
  results->add_flag(
      "--lower-is-better", [a](int64_t) { a->req.set_lower_is_better(true); },
      "best, ranks: smaller values win (perplexity)");
  results->add_option("--value", *a->req.mutable_value(), "final (default) or latest");
  results->add_option("--db", a->db,
                      "Read this SQLite database file directly instead of asking cartd (opened "
                      "as cartd opens it: an older schema is migrated)");
  results->add_option("--format", a->format, "text | csv | markdown | json")
      ->check(CLI::IsMember({"text", "csv", "markdown", "json"}))
      ->capture_default_str();
  AddConnFlags(results, a->conn);
  OnRun(results, [a] { ResultsCommand(*a); });
}

}  // namespace

void RegisterResultsCommands(CLI::App& app) { RegisterResults(app); }

}  // namespace cart::cli
