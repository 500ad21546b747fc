// `cart admin backup --db FILE --out FILE` and `cart admin check --db FILE`: the store's online
// backup and integrity check on a cartd database file. Both open the file read-only; cartd may
// keep running meanwhile (WAL).

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/strings.h"
#include "store/run_store.h"

namespace cart::cli {
namespace {

struct BackupArgs {
  std::string db;
  std::string out;
};

void BackupCommand(const BackupArgs& a) {
  const absl::Status status = store::BackupDatabase(a.db, a.out);
  if (!status.ok()) ExitWith(status);
  std::cout << "backed up " << a.db << " to " << a.out << "\n";
}

void CheckCommand(const std::string& db) {
  const absl::StatusOr<store::IntegrityReport> report = store::CheckDatabase(db);
  if (!report.ok()) ExitWith(report.status());
  if (report->ok) {
    std::cout << db << ": ok\n";
    return;
  }
  for (const std::string& problem : report->problems) std::cout << problem << "\n";
  ExitWith(absl::DataLossError(StrCat(db, ": ", report->problems.size(), " integrity problems")));
}

}  // namespace

void RegisterAdminCommands(CLI::App& app) {
  CLI::App* admin = app.add_subcommand("admin", "Administer a cartd database");
  admin->require_subcommand(1);

  auto ba = std::make_shared<BackupArgs>();
  CLI::App* backup =
      admin->add_subcommand("backup", "Copy a live database consistently (SQLite backup API)");
  backup->add_option("--db", ba->db, "the database file, e.g. var/cart/cart.db")->required();
  backup->add_option("--out", ba->out, "the copy to create; must not exist")->required();
  OnRun(backup, [ba] { BackupCommand(*ba); });

  auto check_db = std::make_shared<std::string>();
  CLI::App* check = admin->add_subcommand(
      "check", "Run PRAGMA integrity_check and foreign_key_check on a database");
  check->add_option("--db", *check_db, "the database file")->required();
  OnRun(check, [check_db] { CheckCommand(*check_db); });
}

}  // namespace cart::cli
