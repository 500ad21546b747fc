// The RAII wrappers of store/internal/sql.h and the schema migrations of store/internal/schema.h.

#include "store/internal/sql.h"

#include <cmath>
#include <limits>

#include "store/internal/schema.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store::internal {
namespace {

using ::cart::testing::IsOk;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kCreateT[] = "CREATE TABLE t(i INTEGER, r REAL, s TEXT)";
constexpr char kInsertT[] = "INSERT INTO t(i, r, s) VALUES(?, ?, ?)";
constexpr char kSelectT[] = "SELECT i, r, s FROM t ORDER BY i";
constexpr char kCountT[] = "SELECT count(*) FROM t";

std::unique_ptr<Database> OpenOrDie(const std::string& path) {
  auto db = Database::Open(path, DatabaseOptions{});
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? std::move(*db) : nullptr;
}

int64_t CountRows(Database& db) {
  auto count = db.Cached(kCountT);
  EXPECT_TRUE(count.ok());
  auto row = (*count)->Step();
  EXPECT_TRUE(row.ok() && *row);
  return (*count)->ColumnInt64(0);
}

std::string PragmaText(Database& db, const char* pragma) {
  auto stmt = db.Cached(pragma);
  EXPECT_TRUE(stmt.ok());
  auto row = (*stmt)->Step();
  EXPECT_TRUE(row.ok() && *row);
  return (*stmt)->ColumnText(0);
}

TEST(SqliteWrapperTest, OpenSetsWalForeignKeysAndBusyTimeout) {
  TempDir dir;
  auto db = OpenOrDie(dir.File("a.db"));
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(PragmaText(*db, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(PragmaText(*db, "PRAGMA foreign_keys"), "1");
  EXPECT_EQ(PragmaText(*db, "PRAGMA busy_timeout"), "5000");
  EXPECT_EQ(PragmaText(*db, "PRAGMA synchronous"), "1");  // NORMAL
}

TEST(SqliteWrapperTest, TypedBindsRoundTripIncludingNanAsNull) {
  TempDir dir;
  auto db = OpenOrDie(dir.File("a.db"));
  ASSERT_NE(db, nullptr);
  CART_ASSERT_OK(db->Execute(kCreateT));
  {
    CART_ASSERT_OK_AND_ASSIGN(auto insert, db->Cached(kInsertT));
    insert->BindAll(int64_t{1} << 40, 2.5, std::string("héllo"));
    CART_ASSERT_OK(insert->Run());
  }
  {
    CART_ASSERT_OK_AND_ASSIGN(auto insert, db->Cached(kInsertT));
    insert->BindAll(int64_t{1} << 41, std::numeric_limits<double>::quiet_NaN(), std::nullopt);
    CART_ASSERT_OK(insert->Run());
  }
  CART_ASSERT_OK_AND_ASSIGN(auto select, db->Cached(kSelectT));
  CART_ASSERT_OK_AND_ASSIGN(bool row, select->Step());
  ASSERT_TRUE(row);
  EXPECT_EQ(select->ColumnInt64(0), int64_t{1} << 40);
  EXPECT_EQ(select->ColumnDouble(1), 2.5);
  EXPECT_EQ(select->ColumnText(2), "héllo");
  CART_ASSERT_OK_AND_ASSIGN(row, select->Step());
  ASSERT_TRUE(row);
  EXPECT_TRUE(select->ColumnIsNull(1));
  EXPECT_TRUE(std::isnan(select->ColumnDouble(1)));
  EXPECT_EQ(select->ColumnOptionalText(2), std::nullopt);
  CART_ASSERT_OK_AND_ASSIGN(row, select->Step());
  EXPECT_FALSE(row);
}

TEST(SqliteWrapperTest, TransactionRollsBackUnlessCommitted) {
  TempDir dir;
  auto db = OpenOrDie(dir.File("a.db"));
  ASSERT_NE(db, nullptr);
  CART_ASSERT_OK(db->Execute(kCreateT));
  {
    Transaction txn(db.get());
    CART_ASSERT_OK(txn.Begin(Transaction::Mode::kImmediate));
    CART_ASSERT_OK_AND_ASSIGN(auto insert, db->Cached(kInsertT));
    insert->BindAll(1, 1.0, "dropped");
    CART_ASSERT_OK(insert->Run());
  }  // no Commit: rolled back
  EXPECT_EQ(CountRows(*db), 0);
  {
    Transaction txn(db.get());
    CART_ASSERT_OK(txn.Begin(Transaction::Mode::kImmediate));
    CART_ASSERT_OK_AND_ASSIGN(auto insert, db->Cached(kInsertT));
    insert->BindAll(1, 1.0, "kept");
    CART_ASSERT_OK(insert->Run());
    CART_ASSERT_OK(txn.Commit());
  }
  EXPECT_EQ(CountRows(*db), 1);
}

TEST(SqliteWrapperTest, SavepointUndoesOnlyItsOwnWrites) {
  TempDir dir;
  auto db = OpenOrDie(dir.File("a.db"));
  ASSERT_NE(db, nullptr);
  CART_ASSERT_OK(db->Execute(kCreateT));
  Transaction txn(db.get());
  CART_ASSERT_OK(txn.Begin());
  for (int i = 0; i < 3; ++i) {
    Savepoint savepoint(db.get());
    CART_ASSERT_OK(savepoint.Begin());
    CART_ASSERT_OK_AND_ASSIGN(auto insert, db->Cached(kInsertT));
    insert->BindAll(i, 0.0, "x");
    CART_ASSERT_OK(insert->Run());
    if (i != 1) {  // i == 1 rolls back in the destructor
      CART_ASSERT_OK(savepoint.Release());
    }
  }
  CART_ASSERT_OK(txn.Commit());
  EXPECT_EQ(CountRows(*db), 2);
}

TEST(SqliteWrapperTest, ErrorsNameTheStatementAndMapToStatusCodes) {
  TempDir dir;
  auto db = OpenOrDie(dir.File("a.db"));
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->Prepare("SELECT nope FROM missing_table"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("missing_table")));
  CART_ASSERT_OK(db->Execute("CREATE TABLE u(k TEXT PRIMARY KEY)"));
  CART_ASSERT_OK(db->Execute("INSERT INTO u(k) VALUES('a')"));
  EXPECT_THAT(db->Execute("INSERT INTO u(k) VALUES('a')"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("UNIQUE")));
}

TEST(SqliteWrapperTest, OpeningAFileThatIsNotADatabaseIsDataLoss) {
  TempDir dir;
  ::cart::testing::WriteFile(dir.File("junk.db"), std::string(8192, 'x'));
  EXPECT_THAT(Database::Open(dir.File("junk.db"), DatabaseOptions{}),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("junk.db")));
  DatabaseOptions no_create;
  no_create.create = false;
  EXPECT_THAT(Database::Open(dir.File("absent.db"), no_create),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.db")));
}

TEST(SchemaTest, FreshDatabaseGetsTheLatestVersion) {
  TempDir dir;
  auto db = OpenOrDie(dir.File("a.db"));
  ASSERT_NE(db, nullptr);
  CART_ASSERT_OK_AND_ASSIGN(int before, SchemaVersion(*db));
  EXPECT_EQ(before, 0);
  CART_ASSERT_OK(Migrate(*db));
  CART_ASSERT_OK_AND_ASSIGN(int after, SchemaVersion(*db));
  EXPECT_EQ(after, LatestSchemaVersion());
  EXPECT_GE(LatestSchemaVersion(), 2);
  CART_ASSERT_OK(Migrate(*db));  // idempotent
  for (size_t i = 0; i < Migrations().size(); ++i) {
    EXPECT_EQ(Migrations()[i].version, static_cast<int>(i + 1)) << "migrations must be ordered";
  }
}

// A database written by schema version 1 (no run_summaries) opens with the current code: it is
// migrated, its rows survive, and the summaries are backfilled from the stored metrics, so results
// queries answer on old data; later columns and tables (run_logs, min_memory_bytes) work on it.
TEST(SchemaTest, OpensVersionOneDatabaseAndBackfillsSummaries) {
  TempDir dir;
  const std::string path = dir.File("v1.db");
  {
    auto db = OpenOrDie(path);
    ASSERT_NE(db, nullptr);
    CART_ASSERT_OK(
        db->Execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
                    "INSERT INTO meta(key, value) VALUES('schema_version', '1');"));
    CART_ASSERT_OK(db->Execute(Migrations()[0].sql));
    CART_ASSERT_OK(db->Execute(R"sql(
      INSERT INTO sweeps(id, name, client_request_id, spec_text, status, priority, created_by,
                         created_us) VALUES(1, 'old', 'req-old', 'spec', 'ACTIVE', 0, 'user:a', 1);
      INSERT INTO runs(id, sweep_id, name, config_yaml, params_json, d, r, p, seed, steps,
                       stored_params, effective_params, memory_estimate_bytes, status, priority,
                       attempt, max_attempts, attempt_floor, cancel_requested, parent_run_id,
                       parent_checkpoint, created_us, updated_us)
        VALUES(1, 1, 'done', 'd: 256', '{"d": "256", "R": "6"}', 256, 6, 6, 42, 100, 1, 1, 1,
               'SUCCEEDED', 0, 1, 3, 0, 0, NULL, NULL, 1, 1),
              (2, 1, 'live', 'd: 512', '{"d": "512", "R": "6"}', 512, 6, 6, 42, 100, 1, 1, 1,
               'RUNNING', 0, 1, 3, 0, 0, NULL, NULL, 1, 1),
              (3, 1, 'evalR', 'd: 256', '{"d": "256", "R": "6", "kind": "eval",
               "eval_loops": "1,2,8"}', 256, 6, 6, 42, 100, 1, 1, 1, 'BLOCKED', 0, 0, 3, 0, 0, 1,
               'final', 1, 1);
      INSERT INTO workers(id, device, memory_bytes, registered_us, last_seen_us)
        VALUES('w', 'cpu', 1, 1, 1);
      INSERT INTO attempts(run_id, attempt, worker_id, leased_us, lease_expires_us, started_us,
                           ended_us, outcome, reason)
        VALUES(1, 1, 'w', 1, 2, 1, 2, 'RELEASED', 'drained');
      INSERT INTO metric_names(id, name) VALUES(1, 'loss');
      INSERT INTO metrics(run_id, name_id, step, value, wall_time_us)
        VALUES(1, 1, 0, 5.0, 10), (1, 1, 99, 2.5, 20), (1, 1, 50, 3.0, 15),
              (2, 1, 0, 6.0, 10), (2, 1, 40, 4.0, 30);
    )sql"));
  }
  auto store = cart::store::testing::OpenStore(path);
  ASSERT_NE(store, nullptr);
  CART_ASSERT_OK_AND_ASSIGN(auto done, store->RunSummaries(1));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].latest_step, 99);
  EXPECT_EQ(done[0].latest_value, 2.5);
  EXPECT_EQ(done[0].final_value, std::optional<double>(2.5));
  CART_ASSERT_OK_AND_ASSIGN(auto live, store->RunSummaries(2));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].latest_step, 40);
  EXPECT_EQ(live[0].final_step, std::nullopt);  // not finished: no final value
  PivotRequest pivot;
  pivot.metric = "loss";
  pivot.row_key = "d";
  pivot.col_key = "R";
  pivot.field = SummaryField::kLatest;
  CART_ASSERT_OK_AND_ASSIGN(PivotTable table, store->Pivot(pivot));
  EXPECT_EQ(table.row_values, (std::vector<std::string>{"256", "512"}));
  EXPECT_EQ(table.cells[0][0].mean, 2.5);
  EXPECT_EQ(table.cells[1][0].mean, 4.0);
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store->GetRun(1));
  EXPECT_EQ(run.name, "done");
  EXPECT_EQ(run.state, RunState::kSucceeded);
  // v5: old runs are placed by their estimate, as before; v4: an empty log, and a live run logs.
  EXPECT_EQ(run.min_memory_bytes, run.memory_estimate_bytes);
  // v6: a job's kind and loop counts, once kept in params, are columns; params hold config keys.
  EXPECT_EQ(run.kind, JobKind::kTrain);
  // v7: a drained attempt, once RELEASED, is DRAINED.
  CART_ASSERT_OK_AND_ASSIGN(auto attempts, store->ListAttempts(1));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].outcome, std::optional<AttemptOutcome>(AttemptOutcome::kDrained));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord eval, store->GetRun(3));
  EXPECT_EQ(eval.kind, JobKind::kEval);
  EXPECT_EQ(eval.eval_loops, (std::vector<int>{1, 2, 8}));
  EXPECT_EQ(eval.params, (std::map<std::string, std::string>{{"d", "256"}, {"R", "6"}}));
  CART_ASSERT_OK_AND_ASSIGN(auto log, store->RunLog(1, 0, 0));
  EXPECT_TRUE(log.empty());
  // v11: old runs and sweeps have no tags or note, and take them after the upgrade.
  EXPECT_TRUE(run.tags.empty());
  EXPECT_EQ(run.note.text, "");
  AnnotationChange change;
  change.add_tags = {"from-v1"};
  CART_ASSERT_OK_AND_ASSIGN(RunRecord tagged, store->AnnotateRun(1, change, {1, "user:a", ""}));
  ASSERT_EQ(tagged.tags.size(), 1u);
  EXPECT_EQ(tagged.tags[0].name, "from-v1");
  CART_ASSERT_OK_AND_ASSIGN(SweepRecord old_sweep,
                            store->AnnotateSweep("old", change, {1, "user:a", ""}));
  EXPECT_EQ(old_sweep.tags.size(), 1u);
  cart::store::LogLine line;
  line.seq = 1;
  line.text = "after the upgrade";
  CART_ASSERT_OK_AND_ASSIGN(int64_t added, store->AppendLog(2, 1, {line}));
  EXPECT_EQ(added, 1);
}

TEST(SchemaTest, RefusesADatabaseFromANewerBuild) {
  TempDir dir;
  const std::string path = dir.File("future.db");
  {
    auto db = OpenOrDie(path);
    ASSERT_NE(db, nullptr);
    CART_ASSERT_OK(Migrate(*db));
    CART_ASSERT_OK(db->Execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'"));
  }
  StoreOptions options;
  options.path = path;
  EXPECT_THAT(RunStore::Open(options),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("schema version 999")));
}

}  // namespace
}  // namespace cart::store::internal
