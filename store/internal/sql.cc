#include "store/internal/sql.h"

#include <cmath>
#include <filesystem>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::store::internal {
namespace {

constexpr char kBegin[] = "BEGIN";
constexpr char kBeginImmediate[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kRollback[] = "ROLLBACK";
constexpr char kSavepoint[] = "SAVEPOINT task";
constexpr char kRelease[] = "RELEASE task";
constexpr char kRollbackTo[] = "ROLLBACK TO task";
constexpr char kProbeSchema[] = "SELECT count(*) FROM sqlite_schema";
constexpr char kJournalWal[] = "PRAGMA journal_mode=WAL";
// temp_store=MEMORY: the sub-journal that lets a savepoint (one per writer call) or a failing
// statement roll back holds a copy of every page it touches; in a temporary file that cost ~1.7 KB
// of write(2) per metric point, 50 times the point's size on disk.
constexpr char kPragmasNormal[] =
    "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL; PRAGMA temp_store=MEMORY";
constexpr char kPragmasFull[] =
    "PRAGMA foreign_keys=ON; PRAGMA synchronous=FULL; PRAGMA temp_store=MEMORY";
constexpr char kQueryOnly[] = "PRAGMA query_only=ON";

// The first words of a statement, to name it in an error without printing a whole query.
std::string Abbreviate(std::string_view sql) {
  constexpr size_t kMax = 60;
  std::string out(sql.substr(0, kMax));
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  if (sql.size() > kMax) out += "...";
  return out;
}

}  // namespace

absl::Status SqliteError(int code, sqlite3* db, std::string_view what) {
  const std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  const std::string message = StrCat("sqlite: ", what, ": ", detail);
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_FULL:  // marked as a full disk (common/file.h), not any exhausted resource
      return NoSpaceError(message);
    case SQLITE_CANTOPEN:
      return absl::NotFoundError(message);
    default:
      return absl::InternalError(message);
  }
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::BindInt64(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }

void Statement::BindDouble(int index, double value) {
  if (std::isnan(value)) {
    sqlite3_bind_null(stmt_, index);
  } else {
    sqlite3_bind_double(stmt_, index, value);
  }
}

void Statement::BindText(int index, std::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
}

void Statement::BindNull(int index) { sqlite3_bind_null(stmt_, index); }

void Statement::BindBlob(int index, std::string_view bytes) {
  sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(rc, db_, Abbreviate(sqlite3_sql(stmt_)));
}

absl::Status Statement::Run() {
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  if (*row) {
    return absl::InternalError(
        StrCat("sqlite: ", Abbreviate(sqlite3_sql(stmt_)), ": returned a row; use Step()"));
  }
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

int64_t Statement::ColumnInt64(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::ColumnDouble(int col) const {
  if (ColumnIsNull(col)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, col);
}

std::string Statement::ColumnText(int col) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  if (text == nullptr) return std::string();
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

std::string Statement::ColumnBlob(int col) const {
  const auto* bytes = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
  if (bytes == nullptr) return std::string();
  return std::string(bytes, static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

std::optional<int64_t> Statement::ColumnOptionalInt64(int col) const {
  if (ColumnIsNull(col)) return std::nullopt;
  return ColumnInt64(col);
}

std::optional<std::string> Statement::ColumnOptionalText(int col) const {
  if (ColumnIsNull(col)) return std::nullopt;
  return ColumnText(col);
}

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                         const DatabaseOptions& options) {
  if (!options.create && !std::filesystem::exists(path)) {
    return absl::NotFoundError(StrCat("database file ", path, " does not exist"));
  }
  int flags = SQLITE_OPEN_NOMUTEX;
  if (options.read_only) {
    flags |= SQLITE_OPEN_READONLY;
  } else {
    flags |= SQLITE_OPEN_READWRITE;
    if (options.create) flags |= SQLITE_OPEN_CREATE;
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteError(rc, raw, StrCat("open ", path));
    sqlite3_close_v2(raw);
    return status;
  }
  std::unique_ptr<Database> db(new Database(raw, path));
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  // Reading the schema here turns "not a database" into an error at open, not at first use.
  if (absl::Status probe = db->Execute(kProbeSchema); !probe.ok()) {
    return absl::Status(probe.code(), StrCat("database ", path, ": ", probe.message()));
  }
  if (!options.read_only) {
    // WAL: readers never block the writer nor the writer readers; one fsync point per commit.
    auto wal = db->Cached(kJournalWal);
    if (!wal.ok()) return wal.status();
    auto row = (*wal)->Step();
    if (!row.ok()) return row.status();
    if (!*row || ToLower((*wal)->ColumnText(0)) != "wal") {
      return absl::InternalError(StrCat("database ", path, " refused journal_mode=WAL"));
    }
  }
  absl::Status pragmas =
      db->Execute(options.synchronous == Synchronous::kFull ? kPragmasFull : kPragmasNormal);
  if (!pragmas.ok()) return pragmas;
  {
    CART_ASSIGN_OR_RETURN(auto cache,
                          db->Prepare(StrCat("PRAGMA cache_size = -", options.cache_kib)));
    CART_RETURN_IF_ERROR(cache->Run());
    CART_ASSIGN_OR_RETURN(auto checkpoint, db->Prepare(StrCat("PRAGMA wal_autocheckpoint = ",
                                                              options.wal_autocheckpoint_pages)));
    CART_ASSIGN_OR_RETURN(bool row, checkpoint->Step());
    (void)row;  // the pragma answers with the new value
  }
  if (options.query_only) {
    absl::Status q = db->Execute(kQueryOnly);
    if (!q.ok()) return q;
  }
  return db;
}

Database::~Database() {
  cache_.clear();  // statements first: sqlite3_close refuses while statements are alive
  sqlite3_close_v2(db_);
}

absl::Status Database::Execute(const char* sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  sqlite3_free(error);
  if (rc != SQLITE_OK) return SqliteError(rc, db_, Abbreviate(sql));
  return absl::OkStatus();
}

absl::StatusOr<CachedStatement> Database::Cached(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it != cache_.end()) {
    it->second->Reset();
    return CachedStatement(it->second.get());
  }
  auto prepared = Prepare(sql);
  if (!prepared.ok()) return prepared.status();
  Statement* out = prepared->get();
  cache_.emplace(std::string(sql), std::move(*prepared));
  return CachedStatement(out);
}

absl::StatusOr<std::unique_ptr<Statement>> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(rc, db_, StrCat("prepare ", Abbreviate(sql)));
  if (stmt == nullptr) {
    return absl::InvalidArgumentError(StrCat("empty SQL: ", Abbreviate(sql)));
  }
  return std::unique_ptr<Statement>(new Statement(db_, stmt));
}

int64_t Database::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

int64_t Database::Changes() const { return sqlite3_changes64(db_); }

bool Database::InAutocommit() const { return sqlite3_get_autocommit(db_) != 0; }

MultiRowInsertSql::MultiRowInsertSql(std::string_view head, std::string_view tuple,
                                     int params_per_row, std::string_view tail, size_t max_rows)
    : params_per_row_(params_per_row) {
  std::string values;
  for (size_t k = 1; k <= max_rows; ++k) {
    if (k > 1) values += ", ";
    values += tuple;
    sql_.push_back(StrCat(head, values, tail));
  }
}

Transaction::~Transaction() { Rollback(); }

absl::Status Transaction::Begin(Mode mode) {
  if (active_) return absl::InternalError("transaction begun twice");
  absl::Status status = db_->Execute(mode == Mode::kImmediate ? kBeginImmediate : kBegin);
  if (status.ok()) active_ = true;
  return status;
}

absl::Status Transaction::Commit() {
  if (!active_) return absl::InternalError("commit without an open transaction");
  absl::Status status = db_->Execute(kCommit);
  if (status.ok()) {
    active_ = false;
  } else {
    Rollback();
  }
  return status;
}

void Transaction::Rollback() {
  if (!active_) return;
  active_ = false;
  // SQLite may already have rolled back by itself (see InAutocommit); ROLLBACK would then fail.
  if (!db_->InAutocommit()) (void)db_->Execute(kRollback);
}

Savepoint::~Savepoint() { RollbackAndRelease(); }

absl::Status Savepoint::Begin() {
  absl::Status status = db_->Execute(kSavepoint);
  if (status.ok()) active_ = true;
  return status;
}

absl::Status Savepoint::Release() {
  if (!active_) return absl::InternalError("release without a savepoint");
  active_ = false;
  return db_->Execute(kRelease);
}

void Savepoint::RollbackAndRelease() {
  if (!active_) return;
  active_ = false;
  if (db_->InAutocommit()) return;  // the whole transaction is gone already
  (void)db_->Execute(kRollbackTo);
  (void)db_->Execute(kRelease);
}

}  // namespace cart::store::internal
