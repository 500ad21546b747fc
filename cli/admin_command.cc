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

void RegisterAdminCommands(CLI::App& app) {
  CLI::App* admin = app.add_subcommand("admin", "Administer a cartd database");
  admin->require_subcommand(1);

  auto backup_db = std::make_shared<std::string>();
  auto backup_out = std::make_shared<std::string>();
  CLI::App* backup =
      admin->add_subcommand("backup", "Copy a live database consistently (SQLite backup API)");
  backup->add_option("--db", *backup_db, "the database file, e.g. var/cart/cart.db")->required();
  backup->add_option("--out", *backup_out, "the copy to create; must not exist")->required();
  OnRun(backup, [backup_db, backup_out] {
    const absl::Status status = store::BackupDatabase(*backup_db, *backup_out);
    if (!status.ok()) ExitWith(status);
    std::cout << "backed up " << *backup_db << " to " << *backup_out << "\n";
  });

  auto check_db = std::make_shared<std::string>();
  CLI::App* check = admin->add_subcommand(
      "check", "Run PRAGMA integrity_check and foreign_key_check on a database");
  check->add_option("--db", *check_db, "the database file")->required();
  OnRun(check, [check_db] {
    const absl::StatusOr<store::IntegrityReport> report = store::CheckDatabase(*check_db);
    if (!report.ok()) ExitWith(report.status());
    if (report->ok) {
      std::cout << *check_db << ": ok\n";
      return;
    }
    for (const std::string& problem : report->problems) std::cout << problem << "\n";
    ExitWith(absl::DataLossError(
        StrCat(*check_db, ": ", report->problems.size(), " integrity problems")));
  });
}

}  // namespace cart::cli
