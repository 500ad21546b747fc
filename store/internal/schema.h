#pragma once

// The database schema as an ordered list of migrations. Version N of the schema is what migrations
// 1..N produce; the version a file has is kept in meta('schema_version'). Opening a file applies
// every migration it lacks, each in its own transaction together with the version bump, so a
// crash mid-upgrade leaves the file at a whole version.
//
// Never edit a migration that has shipped: add a new one at the end.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "store/internal/sql.h"

namespace cart::store::internal {

struct Migration {
  int version;              // 1, 2, ... in order, no gaps
  const char* description;  // one line, for humans
  const char* sql;          // DDL and data statements run in one transaction
};

// All migrations, oldest first. kMigrations().back().version is the version this code writes.
const std::vector<Migration>& Migrations();
int LatestSchemaVersion();

// The schema version of an open database: 0 for a fresh file (no meta table).
absl::StatusOr<int> SchemaVersion(Database& db);

// Brings `db` to LatestSchemaVersion(). FailedPrecondition when the file was written by a newer
// version of the code (its version is above LatestSchemaVersion()); the file is then untouched.
absl::Status Migrate(Database& db);

}  // namespace cart::store::internal
